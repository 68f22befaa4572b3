#!/usr/bin/env bash
# Sets up, builds and runs every test. This is the command CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed as it ends and summed up at the end.
summary=()
phase() {
  local name=$1 start=$SECONDS
  shift
  echo "==== $name"
  "$@"
  summary+=("$(printf '%-34s %4d s' "$name" $((SECONDS - start)))")
  echo "==== $name: $((SECONDS - start)) s"
}
phase "setup and build (scripts/setup.sh)" scripts/setup.sh
# Every tracked C++ file as .clang-format lays it out (scripts/check_format.sh --fix rewrites).
phase "format (check_format.sh)" scripts/check_format.sh
phase "tests (ctest)" ctest --test-dir build --output-on-failure -j"$(nproc)"
# The Python package installs with pip from the checkout (into a scratch virtual environment,
# reusing build/) and imports from outside the source tree.
phase "pip install (check_pip_install.sh)" scripts/check_pip_install.sh
# One clang build with ASan + UBSan (build-asan/) serves the fuzzers and the sanitized suite.
phase "ASan + UBSan build (sanitize.sh)" scripts/sanitize.sh --build-only
# A short fuzzing budget for every parser (libFuzzer); longer runs: scripts/fuzz.sh N.
phase "fuzzers (scripts/fuzz.sh)" env SINKSCOPE_FUZZ_BUILD=build-asan scripts/fuzz.sh "${SINKSCOPE_FUZZ_SECONDS:-10}"
# The whole suite again under ASan + UBSan; see docs/GUARANTEES.md.
phase "ASan + UBSan suite (sanitize.sh)" scripts/sanitize.sh --test-only
printf '%s\n' "==== all passed; wall time per phase:" "${summary[@]}" "total: $SECONDS s"
