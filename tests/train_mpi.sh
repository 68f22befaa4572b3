#!/usr/bin/env bash
# Data-parallel training over two MPI ranks equals the single-process run (same global batch)
# within float tolerance (summation order of the gradient all-reduce).
set -euo pipefail
BIN=$1
TMP=$2
if ! command -v mpirun > /dev/null; then echo "mpirun not found: skipping"; exit 0; fi
rm -rf "$TMP"
mkdir -p "$TMP"
ARGS=(train --preset quick --steps 30 --checkpoint-every 30 --eval-every 30 --threads 1)
"$BIN" "${ARGS[@]}" --out "$TMP/one" > /dev/null 2>&1
mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$BIN" "${ARGS[@]}" --out "$TMP/two" > "$TMP/two.out" 2>&1
grep -q "2 MPI ranks" "$TMP/two.out" || { echo "FAIL: the run did not use 2 ranks"; cat "$TMP/two.out"; exit 1; }
paste <(tail -n +2 "$TMP/one/train_loss.tsv" | cut -f2) <(tail -n +2 "$TMP/two/train_loss.tsv" | cut -f2) |
  awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r; n++ }
       END { printf "2 ranks vs 1 process: %d steps, max rel loss diff %.3g\n", n, m; if (n != 30 || m > 1e-4) exit 1 }'
