#!/usr/bin/env bash
# Sets up, builds and runs the main job on the model the repository ships (stories260K): the model
# summary, a greedy story, and the attention-sink analysis with and without BOS (terminal summary,
# plus out/analyze.json and the self-contained report out/analyze.html).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=models/stories260K/stories260K.bin
sinkscope=build/src/cli/sinkscope
mkdir -p out
echo "== sinkscope inspect --model $model"
$sinkscope inspect --model "$model"
echo
echo "== sinkscope generate --model $model --temperature 0 --steps 128"
$sinkscope generate --model "$model" --temperature 0 --steps 128
echo
echo "== sinkscope analyze --model $model --json out/analyze.json --html out/analyze.html"
$sinkscope analyze --model "$model" --json out/analyze.json --html out/analyze.html
echo
echo "== sinkscope explain --model $model --json out/explain.json --html out/explain.html"
$sinkscope explain --model "$model" --json out/explain.json --html out/explain.html
echo
echo "Reports: out/analyze.html, out/explain.html (open them in a browser); data: out/analyze.json, out/explain.json"
