#!/usr/bin/env bash
# Qwen3.5 / Qwen3.6 benchmark, one run (bench/bench_qwen35.cpp):
#  - the Qwen3.5-0.8B shape (scripts/make_test_model.py --preset qwen3.5-0.8b, BF16, native):
#    prefill at T = 1024 and 8192 with each layer kind's mixer and MLP time, analyze on the same
#    tokens, decode tokens/s through the sinks cache, peak RSS; resident memory over STREAM_08B
#    streamed tokens (default 5,000; the window of 256 is full from token 257 on);
#  - a small random Qwen3.5 (--preset qwen3.5-tiny): 1,000,000 streamed tokens, resident memory at
#    1K, 10K, 100K and 1M (flat: the DeltaNet state and the sinks cache are constant);
#  - the Qwen3.6-35B-A3B shape in Q4_K (bench/make_qwen36_gguf.py, about 19 GB): decode tokens/s
#    and peak RSS, and analyze, stream and chat under /usr/bin/time (maximum resident set size).
# Models are made into WORK (default /tmp/sinkscope_qwen35_bench) once. SKIP_35B=1 skips the 35B.
# Usage: bench/run_qwen35_bench.sh [build dir]
set -euo pipefail
BUILD=${1:-build}
WORK=${WORK:-/tmp/sinkscope_qwen35_bench}
STREAM_08B=${STREAM_08B:-5000}
here=$(cd "$(dirname "$0")/.." && pwd)
ninja -C "$BUILD" sinkscope bench_qwen35 >/dev/null
SS=$(realpath "$BUILD/src/cli/sinkscope")
B=$(realpath "$BUILD/bench/bench_qwen35")
TOK=$here/models/stories260K/tok512.bin
mkdir -p "$WORK"
[ -f "$WORK/q08/config.json" ] || /usr/bin/python3 "$here/scripts/make_test_model.py" --preset qwen3.5-0.8b --out "$WORK/q08" >/dev/null
[ -f "$WORK/tiny/config.json" ] || /usr/bin/python3 "$here/scripts/make_test_model.py" --preset qwen3.5-tiny --out "$WORK/tiny" >/dev/null
echo "$(lscpu | sed -n 's/^Model name: *//p'); $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for T in 1024 8192; do "$B" "$WORK/q08" prefill "$T"; done
"$B" "$WORK/q08" decode 64
"$B" "$WORK/q08" flat "$STREAM_08B"
"$B" "$WORK/tiny" flat 1000000
if [ "${SKIP_35B:-0}" != 1 ]; then
  [ -f "$WORK/q36.gguf" ] || /usr/bin/python3 "$here/bench/make_qwen36_gguf.py" --out "$WORK/q36.gguf" --tokenizer "$TOK"
  "$B" "$WORK/q36.gguf" decode 32
  run() {  # name, then the command; stdin from the prompt line
    local name=$1
    shift
    if echo "Once upon a time" | /usr/bin/time -f "$name: %e s wall, maximum resident set %M KB" "$@" \
        > "$WORK/$name.out" 2> "$WORK/$name.err"; then
      tail -1 "$WORK/$name.err"
    else
      tail -3 "$WORK/$name.err"
    fi
  }
  run analyze "$SS" analyze --model "$WORK/q36.gguf" --samples 4 --length 256 --conditions no-bos
  run stream "$SS" stream --model "$WORK/q36.gguf" --text "$here/data/default_text.txt" \
    --max-tokens 512 --no-bos
  run chat "$SS" chat --model "$WORK/q36.gguf" --max-reply 16
fi
