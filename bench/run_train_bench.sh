#!/usr/bin/env bash
# Training throughput side by side, in one run: the machine's sgemm ceiling, sinkscope's trainer
# (bench_train) and the same model in PyTorch eager (Debian python3-torch), with the same thread
# count and configuration.
#   bench/run_train_bench.sh [BUILD_DIR] [THREADS]
# Configuration via SS_BENCH_DIM / _LAYERS / _HEADS / _VOCAB / _BATCH / _SEQ (default the `text`
# preset's model: D128 L4 H4 V2048, B16 T128).
set -euo pipefail
BUILD=${1:-build}
THREADS=${2:-1}
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
cd "$(dirname "$0")/.."
echo "== sinkscope (threads $THREADS)"
"$BUILD/bench/bench_train" --benchmark_counters_tabular=true
echo "== PyTorch eager (threads $THREADS)"
if /usr/bin/python3 -c "import torch" 2> /dev/null; then
  /usr/bin/python3 bench/torch_train_peer.py "$THREADS" 5
else
  echo "python3-torch not installed (apt-get install -y python3-torch): skipped"
fi
