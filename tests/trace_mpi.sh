#!/usr/bin/env bash
# `sinkscope trace` sharded over two MPI ranks writes the same JSON as one process.
set -euo pipefail
BIN=$1
TMP=$2
if ! command -v mpirun > /dev/null; then echo "mpirun not found: skipping"; exit 0; fi
rm -rf "$TMP"
mkdir -p "$TMP"
"$BIN" train --preset quick --steps 8 --checkpoint-every 2 --eval-every 8 --threads 1 --out "$TMP/run" > /dev/null 2>&1
ARGS=(trace --checkpoints "$TMP/run" --samples 2 --length 16 --no-cache)
OMP_NUM_THREADS=1 "$BIN" "${ARGS[@]}" --json "$TMP/one.json" > /dev/null 2> "$TMP/one.err"
mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$BIN" "${ARGS[@]}" --json "$TMP/two.json" > "$TMP/two.out" 2>&1
grep -q "2 MPI ranks" "$TMP/two.out" || { echo "FAIL: the run did not use 2 ranks"; cat "$TMP/two.out"; exit 1; }
grep -q "\[rank 1\] step" "$TMP/two.out" || { echo "FAIL: rank 1 analysed nothing"; cat "$TMP/two.out"; exit 1; }
n=$(grep -c '"step":' "$TMP/one.json" || true)
[ "$n" -ge 4 ] || { echo "FAIL: expected 4 checkpoints, found $n"; exit 1; }
if cmp -s "$TMP/one.json" "$TMP/two.json"; then
  echo "2 ranks vs 1 process: identical JSON ($n checkpoints)"
else
  echo "FAIL: JSON differs"; diff "$TMP/one.json" "$TMP/two.json" | head -20; exit 1
fi
