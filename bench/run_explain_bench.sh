#!/usr/bin/env bash
# explain at default settings, one run, on this machine:
#   1. the GPT-2-small-shaped random model of bench_explain: the exhaustive intervention table with
#      every intervention sample (the path before the estimates and early stopping) against the
#      default path, side by side, with the check that both name the same verdict and circuit and
#      that every row the default path measured equals the exhaustive one;
#   2. `sinkscope explain` at its defaults (the file's own precision: native for a BF16 file) on
#      each model directory given (scripts/make_test_model.py --preset llama-3.2-1b
#      --plant-p0-circuit 1, --preset llama-2-7b, ...), on random token ids of the model's
#      vocabulary: wall time, CPU time, peak RSS, verdict, circuit, forwards, where it stopped.
#      The exhaustive path on these shapes takes hours (L H + 3 L + 1 forwards a sample, 1,121 for
#      L = H = 32): its cost is printed from that count and the run's own seconds per forward, an
#      estimate, labelled so; OLD=1 runs it.
# Each figure is one run; the load average is printed beside each.
# Usage: bench/run_explain_bench.sh [MODEL_DIR ...]   (BUILD=build by default; NO_GPT2=1 skips 1.)
set -euo pipefail
BUILD=${BUILD:-build}
WORK=${WORK:-/tmp/sinkscope_explain_bench}
SS=$(realpath "$BUILD/src/cli/sinkscope")
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"

echo "date $(date -u +%Y-%m-%d); CPU $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "$(free -g | awk '/Mem:/ {print $2}') GiB; commit $(git -C "$HERE" rev-parse --short HEAD)"

if [ -z "${NO_GPT2:-}" ]; then
  echo
  echo "== GPT-2-small-shaped random model (bench_explain --mode both), load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BUILD/bench/bench_explain"
fi

# Random token ids of a model's vocabulary (seeded), for --tokens.
ids_for() {  # model_dir out
  /usr/bin/python3 - "$1/config.json" "$2" <<'PY'
import json, random, sys
v = json.load(open(sys.argv[1]))["vocab_size"]
r = random.Random(0)
open(sys.argv[2], "w").write(" ".join(str(r.randrange(3, v)) for _ in range(20000)) + "\n")
PY
}

run_one() {  # label model extra-flags...
  local label=$1 model=$2; shift 2
  local name; name=$(basename "$model")
  local ids="$WORK/$name.ids" json="$WORK/$name$label.json" log="$WORK/$name$label.log"
  [ -f "$ids" ] || ids_for "$model" "$ids"
  local load; load=$(cut -d' ' -f1-3 /proc/loadavg)
  /usr/bin/time -v "$SS" explain --model "$model" --tokens "$ids" --json "$json" "$@" > "$log.out" 2> "$log"
  /usr/bin/python3 - "$json" "$log" "$name$label" "$load" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1])); text = open(sys.argv[2]).read(); name, load = sys.argv[3], sys.argv[4]
def grab(pattern):
    return re.search(pattern, text).group(1)
h, m, s = (["0"] + grab(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)").split(":"))[-3:]
wall = int(h) * 3600 + int(m) * 60 + float(s)
cpu = float(grab(r"User time \(seconds\): ([\d.]+)")) + float(grab(r"System time \(seconds\): ([\d.]+)"))
rss = int(grab(r"Maximum resident set size \(kbytes\): (\d+)")) / 1e6
L, H = r["model"]["n_layers"], r["model"]["n_heads"]
circuit = ",".join(c["name"] for c in r["circuit"]["components"]) or "-"
st, st_s, es = r["stopping"], r["settings"], r["estimates"]
fw = r["forward_passes"]
old = st_s["samples"] + st_s["intervention_samples"] * (L * H + 3 * L + 1)
per_fw = r["seconds"]["clean"] / st_s["samples"]
print(f"{name}: {L} layers x {H} heads, {r['model']['parameters'] / 1e9:.2f} B parameters, precision "
      f"{r['model']['precision']}, {st_s['samples']} samples x {st_s['length']} tokens; load before {load}")
print(f"  verdict {r['verdict']}, circuit {{{circuit}}}; stopped ({st['reason']}) after {st['used']} of "
      f"{st['upper_bound']} intervention samples; Spearman (estimate vs measured) target "
      f"{es['spearman']['target_share']}, norm ratio {es['spearman']['norm_ratio_after']}")
print(f"  wall {wall:.1f} s (clean pass {r['seconds']['clean']:.1f} s, interventions "
      f"{r['seconds']['interventions']:.1f} s), CPU {cpu:.1f} s, peak RSS {rss:.2f} GB; {fw} forwards")
print(f"  the exhaustive path without early stopping: {old} forwards, about {old * per_fw / 60:.0f} min at "
      f"this run's {per_fw:.2f} s a clean forward (an estimate, not run)")
PY
}

for model in "$@"; do
  echo
  echo "== explain --model $model (defaults)"
  run_one "" "$model"
  if [ -n "${OLD:-}" ]; then
    run_one ".exhaustive" "$model" --exhaustive --no-early-stop --estimate-samples 0
  fi
done
