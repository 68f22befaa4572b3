#!/usr/bin/env bash
# Data-parallel training over two MPI ranks equals the single-process run (same global batch)
# within float tolerance (summation order of the gradient all-reduce).
set -euo pipefail
BIN=$1
TMP=$2
if ! command -v mpirun > /dev/null; then echo "mpirun not found: skipping"; exit 0; fi
rm -rf "$TMP"
mkdir -p "$TMP"
# Dense (the quick preset) and MoE (moe-quick: the load-balancing loss uses the global batch's
# routing statistics, all-reduced, so it too equals the single-process run).
for preset in quick moe-quick; do
  ARGS=(train --preset "$preset" --steps 30 --checkpoint-every 30 --eval-every 30 --threads 1)
  "$BIN" "${ARGS[@]}" --out "$TMP/$preset-one" > /dev/null 2>&1
  mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$BIN" "${ARGS[@]}" --out "$TMP/$preset-two" > "$TMP/$preset-two.out" 2>&1
  grep -q "2 MPI ranks" "$TMP/$preset-two.out" || { echo "FAIL: the run did not use 2 ranks"; cat "$TMP/$preset-two.out"; exit 1; }
  # Columns 2 (loss) and 4 (aux, 0 for dense) of every step.
  paste <(tail -n +2 "$TMP/$preset-one/train_loss.tsv" | cut -f2,4) <(tail -n +2 "$TMP/$preset-two/train_loss.tsv" | cut -f2,4) |
    awk -v p="$preset" '{ d = $1 - $3; if (d < 0) d = -d; r = d / $1; if (r > m) m = r;
                          a = $2 - $4; if (a < 0) a = -a; if ($2 > 0) a /= $2; if (a > ma) ma = a; n++ }
         END { printf "%s: 2 ranks vs 1 process: %d steps, max rel loss diff %.3g, max rel aux diff %.3g\n", p, n, m, ma;
               if (n != 30 || m > 1e-4 || ma > 1e-4) exit 1 }'
done
