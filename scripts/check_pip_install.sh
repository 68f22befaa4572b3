#!/usr/bin/env bash
# Installs the Python package with `python3 -m pip install .` into a scratch virtual environment
# (Debian's python3 with its system packages, for numpy) and runs it from outside the checkout:
# what README "Python" tells a user to do. Reuses the configured build/ (SINKSCOPE_BUILD_DIR) so
# the extension is not compiled twice; `pip install .` without it builds into build-python/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$venv"
SINKSCOPE_BUILD_DIR="$root/build" "$venv/bin/python3" -m pip install --no-index -q . 2>&1 |
  grep -v "^\s*$" || true
cd "$venv"
"$venv/bin/python3" - "$root/models/stories260K/stories260K.bin" <<'PY'
import sys
import sinkscope
assert sinkscope.__file__.startswith(sys.prefix), sinkscope.__file__
m = sinkscope.load(sys.argv[1])
ids = m.tokenize("Once upon a time")
logits = m.forward(ids)
assert logits.shape == (len(ids), m.config["vocab_size"]), logits.shape
print(f"pip install .: sinkscope {sinkscope.__version__} imported from {sinkscope.__file__}; "
      f"forward {logits.shape} ok")
PY
