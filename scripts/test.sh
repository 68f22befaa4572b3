#!/usr/bin/env bash
# Sets up, builds and runs every test. This is the command CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
