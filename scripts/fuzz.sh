#!/usr/bin/env bash
# Builds the libFuzzer targets in build-fuzz/ (clang-14, ASan + UBSan) and runs each for SECONDS.
# Usage: scripts/fuzz.sh SECONDS
# Needs clang-14 and its fuzzer runtime (Debian: clang-14, libclang-rt-14-dev).
set -euo pipefail
seconds=${1:?usage: scripts/fuzz.sh SECONDS}
cd "$(dirname "$0")/.."
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DSINKSCOPE_FUZZ=ON -DSINKSCOPE_TESTS=OFF -DSINKSCOPE_BENCH=OFF
ninja -C build-fuzz -j"$(nproc)" fuzz_gguf fuzz_tokenizer_json fuzz_safetensors

for target in fuzz_gguf fuzz_tokenizer_json fuzz_safetensors; do
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus" build-fuzz/artifacts/$target
  # Seeds: small GGUF and tokenizer.json files under fuzz/seeds (the shipped vocabularies are
  # megabytes, too slow to mutate).
  if [ -d fuzz/seeds/$target ]; then cp -n fuzz/seeds/$target/* "$corpus"/ 2>/dev/null || true; fi
  extra=()
  if [ "$target" = fuzz_safetensors ]; then
    cp -n fuzz/corpus_safetensors/* "$corpus"/ 2>/dev/null || true
    extra=(-dict=fuzz/safetensors.dict)
  fi
  echo "== $target for ${seconds}s"
  ./build-fuzz/fuzz/$target "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix=build-fuzz/artifacts/$target/ -print_final_stats=1 "${extra[@]}"
done
