#!/usr/bin/env bash
# Fused vs materialised analysis on a GPT-2-small-shaped random model, with the PyTorch peer
# (../shared/tools/torch_materialized_baseline.py: eager PyTorch keeping every attention map, as
# HF output_attentions=True does) beside it in the same run. Prints one table.
#   bench/run_analyze_bench.sh [BUILD_DIR]      (env: LENGTHS, FUSED_ONLY, TORCH_LENGTHS, THREADS, BF16, WAIT)
# WAIT=cli (default) gives both sides the OpenMP wait the CLI's analysis verbs run with
# (GOMP_SPINCOUNT=10000, src/kernels/parallel.h); WAIT=passive makes every thread sleep at once
# (what this script used before 2026-12-02).
# BF16=1 (default) adds "fused bf16" rows (--precision bf16) beside the f32 ones at each of LENGTHS.
# The PyTorch peer needs Debian's python3-torch (/usr/bin/python3); it is skipped when missing, and
# at lengths where its maps alone exceed 24 GB (12 x 12 x T^2 x 4 bytes: 38.7 GB at T = 8192).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
LENGTHS=${LENGTHS:-512,2048,4096}
FUSED_ONLY=${FUSED_ONLY-32768}
TORCH_LENGTHS=${TORCH_LENGTHS-512,2048,4096}
THREADS=${THREADS:-2}
BF16=${BF16:-1}
PEER=${PEER:-../shared/tools/torch_materialized_baseline.py}
export OMP_NUM_THREADS=$THREADS
case "${WAIT:-cli}" in
  cli) export GOMP_SPINCOUNT=10000 ;;
  passive) export OMP_WAIT_POLICY=passive ;;
  *) echo "WAIT must be cli or passive" >&2; exit 2 ;;
esac

out=$(mktemp)
trap 'rm -f "$out"' EXIT
bf16_flag=()
[[ "$BF16" == 1 ]] && bf16_flag=(--bf16)
"$BUILD/bench/bench_analyze" --lengths "$LENGTHS" --fused-only "$FUSED_ONLY" "${bf16_flag[@]}" --tsv > "$out"
grep -v '^TSV' "$out" >&2

rows=$(grep '^TSV' "$out" | cut -f2-)
if [[ -x /usr/bin/python3 && -f "$PEER" ]] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  for T in ${TORCH_LENGTHS//,/ }; do
    line=$(/usr/bin/python3 "$PEER" "$T" --threads "$THREADS" 2>/dev/null | tail -1 || true)
    secs=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<< "$line")
    rss=$(sed -n 's/.*peak_rss_MiB=\([0-9]*\).*/\1/p' <<< "$line")
    flops=$("$BUILD/bench/bench_analyze" --print-flops "$T")
    gf=$(awk -v f="$flops" -v s="${secs:--1}" 'BEGIN { if (s > 0) printf "%.1f", f / s / 1e9; else print -1 }')
    rows+=$'\n'"pytorch	keep-all (eager)	$T	${secs:--1}	-1	${rss:--1}	$gf	"
  done
  for T in ${LENGTHS//,/ }; do
    if ! grep -qw "$T" <<< "${TORCH_LENGTHS//,/ }"; then
      gb=$(awk -v t="$T" 'BEGIN { printf "%.1f", 12 * 12 * t * t * 4 / 1e9 }')
      rows+=$'\n'"pytorch	keep-all (eager)	$T	-1	-1	-1	-1	not run: its maps alone need $gb GB"
    fi
  done
else
  rows+=$'\n'"pytorch	keep-all (eager)	-	-1	-1	-1	-1	not run: /usr/bin/python3 with torch not found"
fi

printf '\n| implementation | path | T | seconds | CPU seconds | peak RSS MiB | GFLOP/s | note |\n'
printf '| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n'
while IFS=$'\t' read -r impl path T secs cpu rss gflops note; do
  [[ -z "$impl" ]] && continue
  [[ "$T" == 0 ]] && T="-"
  fmt() { awk -v v="$1" 'BEGIN { if (v < 0) print "-"; else printf "%.2f", v }'; }
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$impl" "$path" "$T" "$(fmt "$secs")" \
    "$(fmt "$cpu")" "$(awk -v v="$rss" 'BEGIN { if (v < 0) print "-"; else printf "%.0f", v }')" \
    "$(awk -v v="$gflops" 'BEGIN { if (v < 0) print "-"; else printf "%.1f", v }')" "$note"
done <<< "$rows"
