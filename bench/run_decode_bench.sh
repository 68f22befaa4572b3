#!/usr/bin/env bash
# Decode benchmark, one run: greedy decode (256 tokens, temperature 0) of random models shaped
# like llama2.c's stories15M and stories110M, by sinkscope with f32, bf16 and Q8_0 weights
# (--precision bf16, q8_0) and with the weights of a GGUF file in its own 4-bit type (the model
# converted by `sinkscope convert --type q4_0 / q4_k`, run at --precision native; Q4_K needs rows
# of 256 values, so only the 110M shape has it), by llama2.c's run.c (f32) and by runq.c (int8 Q8_0 groups of 64, the format
# its export.py writes), each at 1 and 2 threads; beside them, this machine's read bandwidth
# (bench_membw, measured before and again after the decode runs: the shared machine's bandwidth
# moves between runs, so compare a decode with the higher of the two) and the bandwidth each decode
# achieves (weight bytes read per token x tokens/s).
# run.c / runq.c are built here from LLAMA2C_DIR (default ../shared/tools/peers/llama2c) with
# gcc -Ofast -march=native -fopenmp (their README's fast build, with its threads); models are made by
# bench/make_llama2c_model.py into WORK (default /tmp/sinkscope_decode_bench). Each figure is the
# best of REPEATS runs (default 3; this shared machine's speed moves by 10-25 % from run to run).
# Usage: bench/run_decode_bench.sh [build dir]
set -euo pipefail
BUILD=${1:-build}
PEERS=${LLAMA2C_DIR:-../shared/tools/peers/llama2c}
WORK=${WORK:-/tmp/sinkscope_decode_bench}
STEPS=${STEPS:-256}
REPEATS=${REPEATS:-3}
if [ ! -f "$PEERS/run.c" ]; then
  echo "skip: llama2.c's run.c not found in $PEERS (set LLAMA2C_DIR)"
  exit 0
fi
ninja -C "$BUILD" sinkscope bench_membw >/dev/null
SS=$(realpath "$BUILD/src/cli/sinkscope")
mkdir -p "$WORK"
for prog in run runq; do
  [ -x "$WORK/$prog" ] || gcc -Ofast -march=native -fopenmp -o "$WORK/$prog" "$PEERS/$prog.c" -lm
done
"$BUILD/bench/bench_membw" | tee "$WORK/membw.txt"
printf '\n%-12s %-26s %8s %10s %10s\n' model engine threads "tokens/s" "GB/s read"
for preset in stories15m stories110m; do
  [ -f "$WORK/$preset.bin" ] || /usr/bin/python3 "$(dirname "$0")/make_llama2c_model.py" --preset "$preset" --out "$WORK/$preset" >/dev/null
  types=q4_0
  [ "$preset" = stories110m ] && types="q4_0 q4_k"
  for type in $types; do
    [ -f "$WORK/$preset.$type.gguf" ] || "$SS" convert --model "$WORK/$preset.bin" --tokenizer "$WORK/tokenizer.bin" \
      --to gguf --type "$type" --out "$WORK/$preset.$type.gguf" 2>/dev/null
  done
  # Weight bytes read per token: every matrix once (the classifier is the shared embedding).
  params=$(python3 -c "
import struct
d,f,l,h,kv,v,s=struct.unpack('7i',open('$WORK/$preset.bin','rb').read(28))
print(l*(4*d*d+3*d*f)+abs(v)*d)")
  for threads in 1 2; do
    run() {  # label bytes-per-weight command...
      local label=$1 bpw=$2
      shift 2
      local tps=0 r
      for ((rep = 0; rep < REPEATS; ++rep)); do  # the best of REPEATS runs
        r=$(cd "$WORK" && OMP_NUM_THREADS=$threads "$@" 2>&1 | sed -n -e 's/.*achieved tok\/s: \([0-9.]*\).*/\1/p' -e 's/.*(\([0-9.]*\) tokens\/s).*/\1/p' | tail -1)
        tps=$(python3 -c "print(max($tps, $r))")
      done
      printf '%-12s %-26s %8s %10.1f %10.1f\n' "$preset" "$label" "$threads" "$tps" \
        "$(python3 -c "print($tps*$params*$bpw/1e9)")"
    }
    run "llama2.c run.c (f32)" 4 ./run "$preset.bin" -t 0 -n "$STEPS" -i a
    run "sinkscope f32" 4 "$SS" generate --model "$preset.bin" --tokenizer tokenizer.bin --steps "$STEPS" --temperature 0 --prompt a
    run "sinkscope bf16 weights" 2 "$SS" generate --model "$preset.bin" --tokenizer tokenizer.bin --steps "$STEPS" --temperature 0 --prompt a --precision bf16
    run "sinkscope q8_0 weights" 1.125 "$SS" generate --model "$preset.bin" --tokenizer tokenizer.bin --steps "$STEPS" --temperature 0 --prompt a --precision q8_0
    run "llama2.c runq.c (Q8_0)" 1.0625 ./runq "$preset.q80.bin" -t 0 -n "$STEPS" -i a
    for type in $types; do  # 18 bytes a 32-value Q4_0 block, 144 a 256-value Q4_K one: 0.5625
      run "sinkscope native ${type^^} file" 0.5625 "$SS" generate --model "$preset.$type.gguf" --steps "$STEPS" --temperature 0 --prompt a --precision native
    done
  done
done
echo
echo "read bandwidth again, after the decode runs:"
"$BUILD/bench/bench_membw" | tee "$WORK/membw_after.txt"
