#!/usr/bin/env bash
# Streaming benchmark in one run (bench/bench_stream.cpp): sinks vs recompute per-token time at
# S + W = 256 and 1024 on a GPT-2-small-shaped random Llama, and per-token time and resident memory
# of sinks at 1K, 10K, 100K and 1M streamed tokens on stories260K. Prints a summary table.
# Usage: bench/run_stream_bench.sh [build dir] [extra benchmark flags]
set -euo pipefail
BUILD=${1:-build}
shift || true
ninja -C "$BUILD" bench_stream >/dev/null
OMP_NUM_THREADS=1 exec "$BUILD/bench/bench_stream" "$@"
