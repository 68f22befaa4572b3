#!/bin/sh
# Decode with a long streaming KV cache on a 7B-shaped model, end to end (docs/STREAMING.md,
# "Quantised cache at the 7B shape"): for each ENTRIES:TYPE case, bench_kv_decode in a process of
# its own under /usr/bin/time -v (its tokens/s with every entry filled, and the peak resident
# memory), then `sinkscope generate` with a cache of that size in that type (the CLI's path: the
# cache allocated, a short context decoded). Run from the repository root after a Release build.
#
#   bench/run_kv_decode_bench.sh MODEL TOKENIZER [ENTRIES:TYPE ...]
#   bench/run_kv_decode_bench.sh /data/llama2-7b-random ggml-vocab-llama-spm.gguf 8192:f32 32768:q8_0
#
# Default cases: 8192 entries in f32, q8_0 and q4_0, then 32768 in q8_0 and q4_0 (a 32K f32 cache
# of the 7B shape is 32 GiB; generate is asked for it too, to show the refusal). The model is
# loaded once per case; with less memory than model + cache the page cache thrashes: keep an eye
# on the "Major page faults" line.
set -eu
model=$1
tokenizer=$2
shift 2
cases=${*:-"8192:f32 8192:q8_0 8192:q4_0 32768:q8_0 32768:q4_0 32768:f32"}
bin=build/bench/bench_kv_decode
cli=build/src/cli/sinkscope
tokens=${KV_DECODE_TOKENS:-4}
echo "$(date -u +%Y-%m-%d) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for c in $cases; do
  entries=${c%%:*}
  type=${c#*:}
  echo "== $entries entries, $type"
  if [ "$type" != f32 ] || [ "$entries" -le 8192 ]; then
    /usr/bin/time -v "$bin" "$model" "$entries" "$type" "$tokens" 2>/tmp/kv_decode_time.$$ || true
    sed -n '/Command being timed/q;p' /tmp/kv_decode_time.$$
    grep -E "Maximum resident|Elapsed|Major" /tmp/kv_decode_time.$$ | sed 's/^\t*/  time: /'
  fi
  window=$((entries - 4))
  /usr/bin/time -v "$cli" generate --model "$model" --tokenizer "$tokenizer" --precision native \
      --prompt "Once upon a time" --steps 12 --temperature 0 --policy sinks --sinks 4 \
      --window "$window" --force --kv-type "$type" >/dev/null 2>/tmp/kv_decode_gen.$$ || true
  grep -E "generated|error|needs" /tmp/kv_decode_gen.$$ | sed 's/^/  generate: /'
  grep -E "Maximum resident|Major" /tmp/kv_decode_gen.$$ | sed 's/^\t*/  generate time: /'
  echo "  load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
rm -f /tmp/kv_decode_time.$$ /tmp/kv_decode_gen.$$
