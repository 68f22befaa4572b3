#!/usr/bin/env bash
# Reproduces the StreamingLLM Table 2 experiment on stories260K (docs/STREAMING.md): 200,000 tokens
# of War and Peace through a 256-entry cache with window (0+256), sinks S = 1, 2, 4 (S + (256 - S)),
# recompute (256, on a shorter prefix: it costs one 256-token forward pass per token), and dense up
# to the model's 512-token context. One thread: on a shared machine OpenMP teams only lose time.
# Usage: scripts/stream_repro.sh [build dir] [text] [tokens] [recompute tokens]
set -euo pipefail
BUILD=${1:-build}
TEXT=${2:-../shared/data/corpora/war_and_peace.txt}
N=${3:-200001}
NR=${4:-20001}
OUT=docs/results/stream_stories260K
MODEL=models/stories260K/stories260K.bin
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
run() { "$BUILD/src/cli/sinkscope" stream --model "$MODEL" --text "$TEXT" "$@"; }
run --policy window --sinks 0 --window 256 --max-tokens "$N" --json "$OUT/window_0_256.json"
for S in 1 2 4; do
  run --policy sinks --sinks "$S" --window $((256 - S)) --max-tokens "$N" --json "$OUT/sinks_${S}_$((256 - S)).json"
done
run --policy dense --max-tokens 512 --json "$OUT/dense_512.json"
run --policy recompute --sinks 0 --window 256 --max-tokens "$NR" --json "$OUT/recompute_0_256.json"
