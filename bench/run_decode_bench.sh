#!/usr/bin/env bash
# Decode benchmark, one run: greedy decode (256 tokens, temperature 0) of random models shaped
# like llama2.c's stories15M and stories110M, by sinkscope with f32, bf16 and Q8_0 weights
# (--precision bf16, q8_0: packed at load) and with the weights of a GGUF file in its own type at
# --precision native (BF16, F16, Q8_0, Q4_0, Q4_K, Q6_K written by `sinkscope convert --type`;
# MXFP4 by bench/gguf_retype.cpp from an F32 GGUF, since convert's mxfp4 is llama.cpp's MXFP4_MOE;
# Q4_K and Q6_K need rows of 256 values, so only the 110M shape has them), by llama2.c's run.c
# (f32) and runq.c (int8 Q8_0 groups of 64, the format its export.py writes) where LLAMA2C_DIR has
# them, each at 1 and 2 threads and at each SIMD level of SIMD_LEVELS (`default`: the CPU's best;
# `avx2`: SINKSCOPE_SIMD=avx2, the AVX2 kernels on an AVX-512 CPU). Beside them, this machine's
# read bandwidth (bench_membw, measured before and again after the decode runs: the shared
# machine's bandwidth moves between runs, so a decode is compared with the higher of the two), the
# bandwidth each decode achieves (weight bytes read per token x tokens/s) and its share of the
# read bandwidth at the same thread count.
# run.c / runq.c are built here from LLAMA2C_DIR (default ../shared/tools/peers/llama2c) with
# gcc -Ofast -march=native -fopenmp (their README's fast build, with its threads); models are made by
# bench/make_llama2c_model.py into WORK (default /tmp/sinkscope_decode_bench). Each figure is the
# best of REPEATS runs (default 3; this shared machine's speed moves by 10-25 % from run to run).
# Beside the wall-clock rates, the same from CPU time (user + system seconds of a STEPS run less
# those of a STEPS_SHORT run, default 32, times the threads): on a machine shared with other work
# the wall clock counts the time others held the cores, the CPU time does not.
# sinkscope runs the dense KV cache, as run.c does (--policy dense; generate's default is the sinks
# cache, which over 256 tokens evicts nothing but runs the streaming path).
# Usage: bench/run_decode_bench.sh [build dir]
#   PRESETS="stories110m" SIMD_LEVELS="default avx2"
#   TYPES="f32 bf16 q8_0 q8_0+int8 BF16 F16 Q8_0 Q4_0 Q4_K Q6_K MXFP4 Q8_0+int8 Q4_0+int8 Q4_K+int8
#   Q6_K+int8 MXFP4+int8"
#   (lower case: sinkscope's --precision packs; upper case: a GGUF file's own type at native;
#   +int8: the same with x rounded to int8, --activations int8, kernels/gemm_ggml.h; the others
#   --activations f32, generate's default being int8)
set -euo pipefail
BUILD=${1:-build}
PEERS=${LLAMA2C_DIR:-../shared/tools/peers/llama2c}
WORK=${WORK:-/tmp/sinkscope_decode_bench}
STEPS=${STEPS:-256}
STEPS_SHORT=${STEPS_SHORT:-32}
REPEATS=${REPEATS:-3}
PRESETS=${PRESETS:-stories15m stories110m}
SIMD_LEVELS=${SIMD_LEVELS:-default}
TYPES=${TYPES:-f32 bf16 q8_0 q8_0+int8 BF16 F16 Q8_0 Q4_0 Q4_K Q6_K MXFP4 Q8_0+int8 Q4_0+int8 Q4_K+int8 Q6_K+int8 MXFP4+int8}
ninja -C "$BUILD" sinkscope bench_membw gguf_retype >/dev/null
SS=$(realpath "$BUILD/src/cli/sinkscope")
RETYPE=$(realpath "$BUILD/bench/gguf_retype")
mkdir -p "$WORK"
peers=0
if [ -f "$PEERS/run.c" ]; then
  peers=1
  for prog in run runq; do
    [ -x "$WORK/$prog" ] || gcc -Ofast -march=native -fopenmp -o "$WORK/$prog" "$PEERS/$prog.c" -lm
  done
else
  echo "llama2.c's run.c not found in $PEERS (set LLAMA2C_DIR): sinkscope only"
fi
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
echo "$(lscpu | sed -n 's/^Model name: *//p'); $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ); load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD/bench/bench_membw" | tee "$WORK/membw.txt"
printf '\n%-12s %-28s %-8s %8s %10s %10s %10s %10s\n' model engine simd threads "tokens/s" "GB/s read" "tok/CPU-s" "GB/CPU-s"
for preset in $PRESETS; do
  [ -f "$WORK/$preset.bin" ] || /usr/bin/python3 "$(dirname "$0")/make_llama2c_model.py" --preset "$preset" --out "$WORK/$preset" >/dev/null
  # Weight bytes read per token: every matrix once (the classifier is the shared embedding).
  params=$(python3 -c "
import struct
d,f,l,h,kv,v,s=struct.unpack('7i',open('$WORK/$preset.bin','rb').read(28))
print(l*(4*d*d+3*d*f)+abs(v)*d)")
  dim=$(python3 -c "import struct; print(struct.unpack('i',open('$WORK/$preset.bin','rb').read(4))[0])")
  for type in $TYPES; do  # the GGUF files, each once
    type=${type%+int8}
    lower=${type,,}
    [ "$type" = "$lower" ] && continue
    file="$WORK/$preset.$lower.gguf"
    [ -f "$file" ] && continue
    if [ "$type" = MXFP4 ]; then
      [ -f "$WORK/$preset.f32.gguf" ] || "$SS" convert --model "$WORK/$preset.bin" --tokenizer "$WORK/tokenizer.bin" \
        --to gguf --type f32 --out "$WORK/$preset.f32.gguf" 2>/dev/null
      "$RETYPE" "$WORK/$preset.f32.gguf" "$file" mxfp4 >/dev/null
    else
      "$SS" convert --model "$WORK/$preset.bin" --tokenizer "$WORK/tokenizer.bin" --to gguf --type "$lower" \
        --out "$file" 2>/dev/null
    fi
  done
  for simd in $SIMD_LEVELS; do
    env_simd=()
    [ "$simd" = default ] || env_simd=(SINKSCOPE_SIMD="$simd")
    for threads in 1 2; do
      run() {  # label bytes-per-weight command... (@STEPS@ stands for the step count)
        local label=$1 bpw=$2
        shift 2
        local tps=0 cps=0 r rep
        for ((rep = 0; rep < REPEATS; ++rep)); do  # the best of REPEATS runs
          # Wall: the program's own steady rate, the tokens after the first over the time since it
          # (run.c's and runq.c's "achieved tok/s", sinkscope generate's "after the first": the
          # prompt and the first forward, which also pays the first touch of every mapped weight
          # page, left out of both). CPU: the process's user + system seconds for STEPS and
          # for STEPS_SHORT steps; their difference is what the extra tokens cost, load and prefill
          # left out, times the threads (the rate if each thread had its core).
          local cpu=() n
          for n in "$STEPS" "$STEPS_SHORT"; do
            local args=("${@//@STEPS@/$n}")
            r=$(cd "$WORK" && env "${env_simd[@]}" OMP_NUM_THREADS=$threads /usr/bin/time -f 'cpu %U %S' "${args[@]}" 2>&1)
            cpu+=("$(echo "$r" | sed -n 's/^cpu \([0-9.]*\) \([0-9.]*\)$/\1+\2/p' | tail -1)")
            if [ "$n" = "$STEPS" ]; then
              r=$(echo "$r" | sed -n -e 's/.*achieved tok\/s: \([0-9.]*\).*/\1/p' -e 's/.*; \([0-9.]*\) tokens\/s after the first.*/\1/p' | tail -1)
              tps=$(python3 -c "print(max($tps, ${r:-0}))")
            fi
          done
          cps=$(python3 -c "c = (${cpu[0]:-0}) - (${cpu[1]:-0}); print(max($cps, $((STEPS - STEPS_SHORT)) / c * $threads if c > 0 else 0))")
        done
        local gbs cgbs
        gbs=$(python3 -c "print($tps*$params*$bpw/1e9)")
        cgbs=$(python3 -c "print($cps*$params*$bpw/1e9)")
        printf '%-12s %-28s %-8s %8s %10.1f %10.1f %10.1f %10.1f\n' "$preset" "$label" "$simd" "$threads" "$tps" "$gbs" "$cps" "$cgbs"
        echo "$preset|$label|$simd|$threads|$tps|$gbs|$cps|$cgbs" >>"$RESULTS"
      }
      [ $peers = 1 ] && [ "$simd" = default ] && run "llama2.c run.c (f32)" 4 ./run "$preset.bin" -t 0 -n @STEPS@ -i a
      for entry in $TYPES; do
        type=${entry%+int8}
        suffix=""
        activations=f32
        if [ "$type" != "$entry" ]; then activations=int8; suffix=", int8 x"; fi
        case $type in
          f32) run "sinkscope f32" 4 "$SS" generate --policy dense --model "$preset.bin" --tokenizer tokenizer.bin --steps @STEPS@ --temperature 0 --prompt a ;;
          bf16) run "sinkscope bf16 weights" 2 "$SS" generate --policy dense --model "$preset.bin" --tokenizer tokenizer.bin --steps @STEPS@ --temperature 0 --prompt a --precision bf16 ;;
          # q8_0: 4 bytes of f32 scale a 32-value block with f32 x, the f16 scale of the int8 layout
          # with int8 x (kernels/gemm_q8.h).
          q8_0) run "sinkscope q8_0 weights$suffix" "$([ $activations = int8 ] && echo 1.0625 || echo 1.125)" "$SS" generate --policy dense --model "$preset.bin" --tokenizer tokenizer.bin --steps @STEPS@ --temperature 0 --prompt a --precision q8_0 --activations $activations ;;
          *)
            # Bytes a weight: 2 for BF16 / F16, 34 per 32 for Q8_0, 18 per 32 for Q4_0, 17 per 32
            # for MXFP4, 144 and 210 per 256 for Q4_K and Q6_K (those only where rows are whole 256s).
            case $type in
              BF16 | F16) bpw=2 ;; Q8_0) bpw=1.0625 ;; Q4_0) bpw=0.5625 ;; MXFP4) bpw=0.53125 ;;
              Q4_K) bpw=0.5625 ;; Q6_K) bpw=0.8203125 ;; *) echo "unknown type $type" >&2; exit 1 ;;
            esac
            if [[ $type == Q?_K ]] && [ $((dim % 256)) != 0 ]; then continue; fi
            run "sinkscope native $type$suffix" $bpw "$SS" generate --policy dense --model "$preset.${type,,}.gguf" --steps @STEPS@ --temperature 0 --prompt a --precision native --activations $activations ;;
        esac
      done
      [ $peers = 1 ] && [ "$simd" = default ] && run "llama2.c runq.c (Q8_0)" 1.0625 ./runq "$preset.q80.bin" -t 0 -n @STEPS@ -i a
    done
  done
done
echo
echo "read bandwidth again, after the decode runs:"
"$BUILD/bench/bench_membw" | tee "$WORK/membw_after.txt"
# Each decode's GB/s against the higher of the two read-bandwidth figures at its thread count, by
# the wall clock and by CPU time.
python3 - "$WORK/membw.txt" "$WORK/membw_after.txt" "$RESULTS" <<'EOF'
import re, sys
bw = {1: 0.0, 2: 0.0}
cpu = {1: 0.0, 2: 0.0}
for path in sys.argv[1:3]:
    for line in open(path):
        m = re.match(r"read (\d) threads?: ([0-9.]+) GB/s \(([0-9.]+) per CPU-second", line)
        if m:
            t = int(m.group(1))
            bw[t] = max(bw[t], float(m.group(2)))
            cpu[t] = max(cpu[t], float(m.group(3)))
print("\nshare of the read bandwidth (the higher of the two figures: wall %.1f / %.1f GB/s on 1 / 2 threads, "
      "per CPU-second %.1f / %.1f)" % (bw[1], bw[2], cpu[1], cpu[2]))
print("%-12s %-28s %-8s %8s %10s %8s %10s %8s" % ("model", "engine", "simd", "threads", "GB/s read", "share",
                                                "GB/CPU-s", "share"))
for line in open(sys.argv[3]):
    preset, label, simd, threads, tps, gbs, cps, cgbs = line.strip().split("|")
    t = int(threads)
    share = float(gbs) / bw[t] if bw[t] else 0
    cshare = float(cgbs) / cpu[t] if cpu[t] else 0
    print("%-12s %-28s %-8s %8s %10.1f %7.0f%% %10.1f %7.0f%%" % (preset, label, simd, threads, float(gbs), 100 * share,
                                                             float(cgbs), 100 * cshare))
EOF
