#!/usr/bin/env bash
# Builds the libFuzzer targets in build-fuzz/ (clang-14, ASan + UBSan) and runs each for SECONDS.
# With SINKSCOPE_FUZZ_BUILD=DIR it uses DIR, a build configured with SINKSCOPE_FUZZ=ON already
# (CI: build-asan/, scripts/sanitize.sh), instead of configuring build-fuzz/.
# Usage: scripts/fuzz.sh SECONDS [TARGET...]   (default: every fuzz/fuzz_*.cpp)
# Needs clang-14 and its fuzzer runtime (Debian: clang-14, libclang-rt-14-dev).
# A finding (crash, sanitizer report, leak, timeout, out-of-memory) stops the script with a non-zero
# status; the input that triggered it is in <build>/artifacts/<target>/.
set -euo pipefail
seconds=${1:?usage: scripts/fuzz.sh SECONDS [TARGET...]}
shift
cd "$(dirname "$0")/.."
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
dir=${SINKSCOPE_FUZZ_BUILD:-build-fuzz}
if [[ -z "${SINKSCOPE_FUZZ_BUILD:-}" ]]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++-14 -DSINKSCOPE_FUZZ=ON -DSINKSCOPE_TESTS=OFF -DSINKSCOPE_BENCH=OFF -DSINKSCOPE_PYTHON=OFF >/dev/null
fi
ninja -C "$dir" -j"$(nproc)" "${targets[@]}"

# One target: its corpus, seeds and dictionary; output to $dir/logs/<target>.log and its exit
# status to <target>.rc.
run_one() {
  local target=$1 corpus=$dir/corpus/$1 extra=()
  mkdir -p "$corpus" "$dir/artifacts/$target"
  # Seeds: small files under fuzz/seeds/<target> (real models and vocabularies are megabytes, too
  # slow to mutate).
  if [ -d fuzz/seeds/$target ]; then cp -n fuzz/seeds/$target/* "$corpus"/ 2>/dev/null || true; fi
  if [ "$target" = fuzz_safetensors ]; then
    cp -n fuzz/corpus_safetensors/* "$corpus"/ 2>/dev/null || true
    extra=(-dict=fuzz/safetensors.dict)
  fi
  if [ -f fuzz/$target.dict ]; then extra=(-dict=fuzz/$target.dict); fi
  local status=0
  "$dir/fuzz/$target" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=25 \
    -max_len=65536 -artifact_prefix=$dir/artifacts/$target/ -print_final_stats=1 "${extra[@]}" \
    >$dir/logs/$target.log 2>&1 || status=$?
  echo "$status" >$dir/logs/$target.rc
}

# Targets run side by side, one per core (SINKSCOPE_FUZZ_JOBS): each is single-threaded.
jobs_max=${SINKSCOPE_FUZZ_JOBS:-$(nproc)}
rm -rf $dir/logs
mkdir -p $dir/logs
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  echo "== $target for ${seconds}s"
  run_one "$target" &
done
wait
failed=0
for target in "${targets[@]}"; do
  rc=$(cat $dir/logs/$target.rc 2>/dev/null || echo 1)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' $dir/logs/$target.log | tail -1)
  if [ "$rc" != 0 ]; then
    echo "== $target FAILED (exit $rc); its log:"
    cat $dir/logs/$target.log
    failed=1
  else
    echo "== $target: ${runs:-?} inputs, no finding"
  fi
done
exit $failed
