#!/usr/bin/env bash
# Sets up, builds and runs the main job on the model the repository ships (stories260K):
# the model summary, then a greedy story.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=models/stories260K/stories260K.bin
echo "== sinkscope inspect --model $model"
build/src/cli/sinkscope inspect --model "$model"
echo
echo "== sinkscope generate --model $model --temperature 0 --steps 256"
build/src/cli/sinkscope generate --model "$model" --temperature 0 --steps 256
