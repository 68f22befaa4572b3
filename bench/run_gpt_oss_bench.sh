#!/usr/bin/env bash
# gpt-oss benchmark, one run, at the file's precision (native): a random model of gpt-oss-20b's
# shape in the published layout (scripts/make_test_model.py --preset gpt-oss-20b: MXFP4 experts,
# BF16 elsewhere, 13.8 GB), on this machine:
#   - this machine's read and copy bandwidth (bench_membw), before and again after the runs, and at
#     the end each decode's GB/s as a share of each (the higher of the two figures);
#   - load time and peak RSS, and greedy decode (generate, 64 tokens after a one-token prompt) at 2
#     and 1 threads, with x in int8 (generate's default: the MXFP4 experts packed at load, 17 bytes
#     a 32-value block of a row as in the file, since 9a9b6ff; 18 before) and in f32 (--activations
#     f32: the experts read as stored): the steady tokens/s (the tokens after the first over the time since it; the first
#     tokens map the pages of the weights they read, so short runs understate it), and the weight
#     bytes a token reads counting only the 4 active experts of each layer (attention, router, 4 of
#     32 experts, the LM head), times tokens/s as GB/s;
#   - analyze --length 1024 (one sample, one condition): wall time and peak RSS;
#   - MXFP4 against the same weights in Q8_0 and against BF16 experts (x in f32). The 20B model in
#     either does not fit this 24 GB machine (Q8_0 22 GB, BF16 42 GB as files; convert reads the model in f32,
#     84 GB), so the comparison runs on a slice: the 20B's layers, vocabulary and head, but 2 layers
#     (SLICE_LAYERS), made by the script. Q8_0: the slice converted by `sinkscope convert --to gguf
#     --type q8_0 --expert-type q8_0` (19 GB RSS). BF16: convert to BF16 needs more than 24 GB
#     for the slice (the f32 weights and the output), so make_test_model writes the slice again with
#     --expert-dtype bf16 (same shapes and seed; its experts not rounded to MXFP4).
# "Load" is the run's wall time less the generation's own timer (so it includes the tokenizer and
# the prompt, a few ms). The model is memory-mapped: a load or decode that finds its pages on disk
# rather than in the page cache is disk-bound, so the first run is labelled "as found" and the
# files are then read through once (fincore reports how much of them the page cache holds). Each
# decode runs REPEATS times (default 3; the first, "as found", once) and reports its best steady
# rate beside the range: this shared machine's speed moves by 10-25 % from run to run, and more in
# slow spells; the load average is printed beside each. analyze is one run. Run it holding the big-memory lock
# (flock /work/wt/bigmem.lock ...): the slice's conversion holds about 16 GB.
# Usage: bench/run_gpt_oss_bench.sh MODEL_DIR [build dir]   (NO_SLICE=1: skip the Q8_0 / BF16 slice;
#   SLICE_ONLY=1: only the slice, after the bandwidth)
set -euo pipefail
MODEL=${1:?usage: bench/run_gpt_oss_bench.sh MODEL_DIR [build dir]}
BUILD=${2:-build}
WORK=${WORK:-/tmp/sinkscope_gpt_oss_bench}
STEPS=${STEPS:-65}
SLICE_LAYERS=${SLICE_LAYERS:-2}
SS=$(realpath "$BUILD/src/cli/sinkscope")
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"

echo "date $(date -u +%Y-%m-%d); CPU $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "model $MODEL ($(du -sh "$MODEL" | cut -f1)); commit $(git -C "$HERE" rev-parse --short HEAD)"
echo
echo "read bandwidth before the runs (bench_membw):"
"$BUILD/bench/bench_membw" | tee "$WORK/membw_before.txt"
: > "$WORK/rates.txt"

# Weight bytes one decode token reads at native precision, from config.json: every attention
# projection, the router (held f32), the active experts only (top-k of E), the LM head; biases and
# norms at f32. $2: bytes a weight of the projections / experts / head take in the file's types.
bytes_per_token() {  # config.json  proj-bytes  expert-bytes  head-bytes
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); bp, be, bh = map(float, sys.argv[2:5])
L, D, H, KV, Dh = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
E, K, F, V = c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"], c["vocab_size"]
q, kv = H * Dh, KV * Dh
attn = L * (q * D + 2 * kv * D + D * q) * bp
router = L * E * D * 4
experts = L * K * (2 * F * D + D * F) * be
small = L * ((q + 2 * kv + D + E + H + 2 * D) + K * (2 * F + D)) * 4
head = V * D * bh + D * 2  # the head, and the token's embedding row
total = attn + router + experts + small + head
print(f"{total:.0f} {attn:.0f} {experts:.0f} {head:.0f}")
PY
}

# A greedy decode, REPEATS times (default 3): prints the best steady tokens/s and the range, its
# GB/s, and the first run's load seconds, wall and peak RSS (the later runs find the pages mapped
# by the first in the page cache; RSS is the largest of the runs). The best, as bench_membw's
# figures are the best of five passes: this shared machine has slow spells of a run or two (a
# 2-thread decode at 8.0 tokens/s one run, 10.9-12.8 in the six after it).
decode() {  # label model threads bytes-per-token [activations, default f32]
  local label=$1 model=$2 threads=$3 bpt=$4 act=${5:-f32} i logs=()
  for i in $(seq 1 "${REPEATS:-3}"); do
    /usr/bin/time -v "$SS" generate --model "$model" --no-bos --prompt "The" --steps "$STEPS" \
      --temperature 0 --threads "$threads" --activations "$act" > /dev/null 2> "$WORK/decode$i.log"
    logs+=("$WORK/decode$i.log")
  done
  /usr/bin/python3 - "$WORK" "$label" "$threads" "$bpt" "$(cut -d' ' -f1-3 /proc/loadavg)" "${logs[@]}" <<'PY'
import re, sys
work, label, threads, bpt, load = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
rates, rss = [], 0.0
for i, path in enumerate(sys.argv[6:]):
    text = open(path).read()
    n, secs, tps = re.search(r"generated (\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s", text).groups()
    steady = re.search(r"([\d.]+) tokens/s after the first", text)  # the rate run.c reports
    rates.append(float(steady.group(1) if steady else tps))
    rss = max(rss, int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1e6)
    if i == 0:
        h, m, s = (["0"] + re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)",
                                     text).group(1).split(":"))[-3:]
        wall = int(h) * 3600 + int(m) * 60 + float(s)
        load_s = wall - float(secs)
best = max(rates)
spread = f"{min(rates):.1f}-{best:.1f}"
print(f"{label:<46} {threads:>7} {best:9.2f} {spread:>11} {bpt / 1e9:9.3f} {best * bpt / 1e9:8.2f} "
      f"{load_s:8.1f} {wall:7.1f} {rss:8.2f}   {load}")
with open(f"{work}/rates.txt", "a") as f:
    f.write(f"{label}|{threads}|{best * bpt / 1e9:.3f}\n")
PY
}

# The bandwidth again, then each decode's GB/s against the higher of the two figures (before and
# after) at its thread count: the read bandwidth (what a decode, which only reads, can reach) and
# the copy bandwidth (memcpy's bytes read plus bytes written; glibc's large copies store past the
# cache, so both directions stream at once and the figure is above the read one).
finish() {
  echo
  echo "read bandwidth again, after the runs:"
  "$BUILD/bench/bench_membw" | tee "$WORK/membw_after.txt"
  /usr/bin/python3 - "$WORK" <<'PY'
import re, sys
work = sys.argv[1]
bw = {}
for name in ("membw_before.txt", "membw_after.txt"):
    for line in open(f"{work}/{name}"):
        m = re.match(r"(read|memcpy) (\d) threads?.*?: ([0-9.]+) GB/s", line)
        if m:
            key = (m.group(1), int(m.group(2)))
            bw[key] = max(bw.get(key, 0.0), float(m.group(3)))
print("\neach decode's GB/s against the higher figure at its thread count "
      f"(read {bw.get(('read', 1), 0):.1f} / {bw.get(('read', 2), 0):.1f} GB/s, "
      f"copy {bw.get(('memcpy', 1), 0):.1f} / {bw.get(('memcpy', 2), 0):.1f} on 1 / 2 threads):")
print(f"{'run':<46} {'threads':>7} {'GB/s':>8} {'of read':>8} {'of copy':>8}")
for line in open(f"{work}/rates.txt"):
    label, threads, gbs = line.strip().split("|")
    t, g = int(threads), float(gbs)
    share = lambda k: f"{100 * g / bw[(k, t)]:7.0f}%" if bw.get((k, t)) else "      -"
    print(f"{label:<46} {t:>7} {g:8.2f} {share('read')} {share('memcpy')}")
PY
}

# How many bytes of the files the page cache holds.
cached() { fincore -b "$@" 2>/dev/null | awk 'NR > 1 {r += $1; s += $3} END {printf "%.1f of %.1f GB", r / 1e9, s / 1e9}'; }

header() {
  printf '\n%-46s %7s %9s %11s %9s %8s %8s %7s %8s   %s\n' run threads "tok/s" "range" "GB/tok" "GB/s" \
    "load s" "wall s" \
    "RSS GB" "load average"
}

read -r BPT ATTN EXPERTS HEAD <<< "$(bytes_per_token "$MODEL/config.json" 2 0.53125 2)"
echo
if [ -z "${SLICE_ONLY:-}" ]; then
echo "gpt-oss-20b shape, MXFP4 experts (17 bytes a 32-value block) and BF16 elsewhere, native:"
echo "bytes read per decode token: $(/usr/bin/python3 -c "print(f'{$BPT/1e9:.3f} GB: attention {$ATTN/1e9:.3f}, 4 active experts x 24 layers {$EXPERTS/1e9:.3f}, LM head {$HEAD/1e9:.3f}, the rest (router f32, biases, norms) {($BPT-$ATTN-$EXPERTS-$HEAD)/1e9:.3f}')")"
echo "in the page cache before the first run: $(cached "$MODEL"/*.safetensors)"
header
REPEATS=1 decode "decode, native, x int8 (default), page cache as found" "$MODEL" 2 "$BPT" int8
cat "$MODEL"/*.safetensors > /dev/null  # the whole file into the page cache, if it fits beside the rest
echo "in the page cache after reading the files: $(cached "$MODEL"/*.safetensors)"
for threads in 2 1; do
  decode "decode, native, x int8 (default)" "$MODEL" $threads "$BPT" int8
  decode "decode, native, x f32" "$MODEL" $threads "$BPT"
done
echo "in the page cache after the decodes: $(cached "$MODEL"/*.safetensors)"

echo
echo "analyze --samples 1 --length 1024 --conditions no-bos (native):"
/usr/bin/time -v "$SS" analyze --model "$MODEL" --samples 1 --length 1024 --conditions no-bos \
  --json "$WORK/analyze1024.json" > "$WORK/analyze1024.out" 2> "$WORK/analyze1024.err"
grep -E "Elapsed|Maximum resident" "$WORK/analyze1024.err"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [ -n "${NO_SLICE:-}" ]; then
  finish
  exit 0
fi
echo
echo "MXFP4 against Q8_0 and BF16 on a $SLICE_LAYERS-layer slice of the 20B shape (same vocabulary and head):"
SLICE="$WORK/slice$SLICE_LAYERS"
[ -d "$SLICE" ] || /usr/bin/python3 "$HERE/scripts/make_test_model.py" --preset gpt-oss-20b --layers "$SLICE_LAYERS" \
  --sink-logit 6 --out "$SLICE" 2> /dev/null
if [ ! -f "$SLICE.q8_0.gguf" ]; then
  /usr/bin/time -v "$SS" convert --model "$SLICE" --to gguf --type q8_0 --expert-type q8_0 \
    --out "$SLICE.q8_0.gguf" 2> "$WORK/convert_q8_0.err"
  echo "convert to q8_0: $(grep -E "Maximum resident" "$WORK/convert_q8_0.err" | sed 's/^\s*//')"
fi
[ -d "$SLICE.bf16" ] || /usr/bin/python3 "$HERE/scripts/make_test_model.py" --preset gpt-oss-20b \
  --layers "$SLICE_LAYERS" --sink-logit 6 --expert-dtype bf16 --out "$SLICE.bf16" 2> /dev/null
echo "files: MXFP4 (HF) $(du -sh "$SLICE" | cut -f1), Q8_0 $(du -sh "$SLICE.q8_0.gguf" | cut -f1), BF16 (HF) $(du -sh "$SLICE.bf16" | cut -f1)"
read -r B_MX _ E_MX _ <<< "$(bytes_per_token "$SLICE/config.json" 2 0.53125 2)"
read -r B_Q8 _ E_Q8 _ <<< "$(bytes_per_token "$SLICE/config.json" 1.0625 1.0625 1.0625)"
# The BF16 experts of a Hugging Face gpt-oss file are (in, out) ordered (transformers' layout after
# dequantising): the loader transposes them into f32 matrices, so they are read at 4 bytes a weight.
read -r B_BF _ E_BF _ <<< "$(bytes_per_token "$SLICE/config.json" 2 4 2)"
echo "active experts' bytes per token: MXFP4 $(/usr/bin/python3 -c "print(f'{$E_MX/1e6:.0f}')") MB, Q8_0 $(/usr/bin/python3 -c "print(f'{$E_Q8/1e6:.0f}')") MB, BF16 file (held f32) $(/usr/bin/python3 -c "print(f'{$E_BF/1e6:.0f}')") MB"
cat "$SLICE"/*.safetensors "$SLICE.q8_0.gguf" "$SLICE.bf16"/*.safetensors > /dev/null  # into the page cache
echo "in the page cache: $(cached "$SLICE"/*.safetensors "$SLICE.q8_0.gguf" "$SLICE.bf16"/*.safetensors)"
header
for threads in 2 1; do
  decode "slice: MXFP4 experts, BF16 (HF)" "$SLICE" $threads "$B_MX"
  decode "slice: Q8_0 everywhere (GGUF)" "$SLICE.q8_0.gguf" $threads "$B_Q8"
  decode "slice: BF16, experts f32 (HF)" "$SLICE.bf16" $threads "$B_BF"
done

finish
