#!/usr/bin/env bash
# Gated attention against its softmax twin, trained here: the Bigram-Backcopy recipe of
# docs/FINDINGS.md (one layer, one head, BOS) for 3,000 steps under attention=softmax and
# attention=gated, then analyze on the same held-out windows. The gated model's gate-weighted
# alpha_0 (the share of its head's output that comes from position 0) must be well under the
# softmax twin's alpha_0 (its gate is 1). Measured on 2026-12-08 (AMD EPYC Zen 5): softmax alpha_0
# 0.127; gated alpha_0 0.103, gate-weighted 0.037 (gate 0.29 at position 0, 0.37 elsewhere).
#   tests/gate_twins_e2e.sh SINKSCOPE_BINARY WORK_DIR
set -euo pipefail
bin=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
recipe=(--preset bigram-backcopy --bos --set n_heads=1 --set n_kv_heads=1 --set n_layers=1
        --set min_lr=0.003 --set weight_decay=0 --batch 32 --seq-len 32 --threads 1)
for v in softmax gated; do
  "$bin" train "${recipe[@]}" --set attention=$v --steps 3000 --eval-every 3000 \
    --checkpoint-every 3000 --out "$work/$v" > "$work/$v.log" 2>&1 &
done
wait %1
wait %2
"$bin" train "${recipe[@]}" --write-stream "$work/stream.txt" > /dev/null
for v in softmax gated; do
  "$bin" analyze --model "$work/$v/step-3000" --tokens "$work/stream.txt" --length 32 \
    --samples 64 --conditions bos --json "$work/$v.json" > "$work/$v.txt"
done
grep -q "gate-weighted alpha_0" "$work/gated.txt"
python3 - "$work/softmax.json" "$work/gated.json" <<'PY'
import json, sys
soft = json.load(open(sys.argv[1]))["conditions"][0]
gated = json.load(open(sys.argv[2]))["conditions"][0]
assert "output_gate" not in soft, "the softmax twin has no gate"
a_soft = soft["alpha"][0][0][0]
g = gated["output_gate"]
a_gated, weighted = gated["alpha"][0][0][0], g["gated_alpha0"][0][0]
print(f"softmax alpha_0 {a_soft:.3f}; gated alpha_0 {a_gated:.3f}, gate-weighted {weighted:.3f} "
      f"(gate {g['head_p0'][0][0]:.3f} at P0, {g['head_rest'][0][0]:.3f} elsewhere)")
assert 0 < weighted < a_gated, (weighted, a_gated)
assert weighted < 0.5 * a_soft, (weighted, a_soft)
PY
