#!/usr/bin/env bash
# Sets up, builds and runs every test. This is the command CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# A short fuzzing budget for every parser (libFuzzer, ASan + UBSan); longer runs: scripts/fuzz.sh N.
scripts/fuzz.sh "${SINKSCOPE_FUZZ_SECONDS:-10}"
ctest --test-dir build --output-on-failure -j"$(nproc)"
# The Python package installs with pip from the checkout (into a scratch virtual environment,
# reusing build/) and imports from outside the source tree.
scripts/check_pip_install.sh
# The same suite built with ASan + UBSan (build-asan/); see docs/GUARANTEES.md.
scripts/sanitize.sh
