#!/usr/bin/env bash
# scripts/twins.sh end to end on a tiny Bigram-Backcopy run: five variants train, the comparison
# lists them with the fields each variant has (sink slot, gate, trigger / other loss), an existing
# OUT and an unknown variant are refused with a non-zero exit.
#   tests/twins_e2e.sh SINKSCOPE_BINARY WORK_DIR
set -euo pipefail
bin=$1
work=$2
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work"
mkdir -p "$work"
export SINKSCOPE=$bin
args=(--preset quick --set dim=32 --set n_layers=1 --steps 30 --eval-every 10 --checkpoint-every 10 --threads 1)
"$here/scripts/twins.sh" "$work/t" softmax,sink-logit,gated,kv-bias,sigmoid --jobs 2 -- "${args[@]}" > "$work/table.md"
python3 - "$work/t/comparison.json" <<'PY'
import json, sys
runs = {r["variant"]: r for r in json.load(open(sys.argv[1]))["runs"]}
assert list(runs) == ["softmax", "sink-logit", "gated", "kv-bias", "sigmoid"], runs.keys()
for v, r in runs.items():
    assert r["step"] == 30 and r["val_loss"] > 0, r
    assert r["trigger_loss"] is not None and r["other_loss"] is not None, r
    assert min(r["trigger_loss"], r["other_loss"]) <= r["val_loss"] + 1e-9 <= max(r["trigger_loss"], r["other_loss"]) + 2e-9, r
assert runs["sink-logit"]["alpha_sink"] is not None and runs["softmax"]["alpha_sink"] is None
assert runs["kv-bias"]["alpha_sink"] is not None and runs["sigmoid"]["alpha_sink"] is None
assert 0 < runs["gated"]["gate_p0"] < 1 and runs["softmax"]["gate_p0"] is None
print("twins comparison:", {v: round(r["val_loss"], 4) for v, r in runs.items()})
PY
grep -q "| gated |" "$work/t/comparison.md"
grep -q "<polyline" "$work/t/comparison.html"
grep -q "loss after triggers" "$work/t/comparison.html"
if "$here/scripts/twins.sh" "$work/t" softmax -- "${args[@]}" 2> "$work/err"; then
  echo "an existing OUT was accepted" >&2; exit 1
fi
grep -q "exists and is not empty" "$work/err"
if "$here/scripts/twins.sh" "$work/u" softmax,no-such-rule -- "${args[@]}" 2> "$work/err2"; then
  echo "an unknown variant was accepted" >&2; exit 1
fi
grep -q "no-such-rule" "$work/err2"
test ! -e "$work/u/comparison.json"
# trace --twins: every variant's checkpoints on the same samples, side by side and overlaid.
"$bin" trace --twins "$work/t" --samples 2 --length 16 --json "$work/tw.json" --html "$work/tw.html" > "$work/tw.txt"
python3 - "$work/tw.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["schema"] == "sinkscope.trace-twins/1", doc["schema"]
runs = doc["runs"]
assert [r["name"] for r in runs] == ["softmax", "sink-logit", "gated", "kv-bias", "sigmoid"], [r["name"] for r in runs]
for r in runs:
    assert [p["step"] for p in r["points"]] == [10, 20, 30], r["points"]
    assert all(p["stage"] in ("none", "early", "transitional", "converged") for p in r["points"])
    assert all(0 <= p["alpha0_max_layer"] <= 1 for p in r["points"])
    assert len(r["checkpoints"]) == 3 and not r["failed"]
slot = {r["name"]: r["points"][-1]["slot_share"] for r in runs}
assert slot["softmax"] is None and slot["sigmoid"] is None and slot["kv-bias"] is not None and slot["sink-logit"] is not None, slot
print("trace twins:", {r["name"]: r["points"][-1]["stage"] for r in runs})
PY
grep -q "side by side" "$work/tw.txt"
grep -q "<polyline" "$work/tw.html"
grep -q "Stages side by side" "$work/tw.html"
if "$bin" trace --twins "$work/t/softmax" --samples 2 --length 16 2> "$work/err3"; then
  echo "a single twin was accepted" >&2; exit 1
fi
grep -q "two or more run directories" "$work/err3"
if "$bin" trace --twins "$work/t" --checkpoints "$work/t/softmax" 2> "$work/err4"; then
  echo "--twins with --checkpoints was accepted" >&2; exit 1
fi
grep -q "either --checkpoints" "$work/err4"
# Runs whose samples differ (another Bigram-Backcopy table) are not twins: refused, naming both.
"$bin" train --preset quick --set dim=32 --set n_layers=1 --set bb_seed=99 --steps 10 --eval-every 10 \
    --checkpoint-every 10 --threads 1 --out "$work/other" > /dev/null 2>&1
if "$bin" trace --twins "$work/t/softmax,$work/other" --samples 2 --length 16 2> "$work/err5" > /dev/null; then
  echo "twins with different samples were accepted" >&2; exit 1
fi
grep -q "must share their samples" "$work/err5"
# Text runs: the samples are token ids, so runs with different tokenizers are not twins either.
for d in $(seq 1 40); do echo "Document $d tells of the quick brown fox and the lazy dog, $((d * 7)) times."; echo; done > "$work/corpus.txt"
"$bin" train --preset text --corpus "$work/corpus.txt" --set vocab_size=300 --set dim=32 --set n_layers=1 \
    --set seq_len=16 --steps 4 --eval-every 4 --checkpoint-every 4 --threads 1 --out "$work/text_a" > /dev/null 2>&1
cp -r "$work/text_a" "$work/text_b"
python3 - "$work/text_b/step-4/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
vocab = t["model"]["vocab"]
a, b = sorted(vocab, key=vocab.get)[-2:]   # swap the ids of the last two pieces
vocab[a], vocab[b] = vocab[b], vocab[a]
json.dump(t, open(sys.argv[1], "w"))
PY
if "$bin" trace --twins "$work/text_a,$work/text_b" --samples 2 --length 8 2> "$work/err6" > /dev/null; then
  echo "text runs with different tokenizers were accepted as twins" >&2; exit 1
fi
grep -q "must share their samples" "$work/err6"
echo "twins_e2e: ok"
