#!/usr/bin/env bash
# CI end to end for `sinkscope train --preset quick`: train, checkpoint, kill -9 mid-run, resume
# (the loss log must equal the uninterrupted run's bit for bit), reload the final checkpoint
# through the analysis forward pass (its loss must equal the trainer's validation loss).
set -euo pipefail
BIN=$1
TMP=$2
rm -rf "$TMP"
mkdir -p "$TMP"
"$BIN" train --preset quick --out "$TMP/full" --threads 1 > "$TMP/full.out" 2> "$TMP/full.err"
n=$(ls -d "$TMP"/full/step-* | wc -l)
echo "uninterrupted run: $n checkpoints"
[ "$n" -ge 3 ] || { echo "FAIL: expected >= 3 checkpoints"; exit 1; }

"$BIN" train --preset quick --out "$TMP/cut" --threads 1 > /dev/null 2> "$TMP/cut.err" &
pid=$!
for _ in $(seq 1 1200); do
  [ -d "$TMP/cut/step-200" ] && break
  sleep 0.1
done
kill -9 "$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
echo "killed (SIGKILL) after $(($(wc -l < "$TMP/cut/train_loss.tsv") - 1)) logged steps; checkpoints: $(ls "$TMP/cut" | grep step- | tr '\n' ' ')"
"$BIN" train --resume "$TMP/cut" --threads 1 > /dev/null 2> "$TMP/resume.err"
if cmp -s "$TMP/full/train_loss.tsv" "$TMP/cut/train_loss.tsv"; then
  echo "resume: loss log identical to the uninterrupted run ($(($(wc -l < "$TMP/full/train_loss.tsv") - 1)) steps)"
else
  echo "FAIL: loss logs differ"; diff "$TMP/full/train_loss.tsv" "$TMP/cut/train_loss.tsv" | head; exit 1
fi

last=$(ls -d "$TMP"/full/step-* | sort -t- -k2 -n | tail -1)
reloaded=$("$BIN" train --eval "$last" --eval-batches 1 | cut -f3)
trained=$(tail -1 "$TMP/full/telemetry.jsonl" | sed 's/.*"val_loss":\([0-9.e+-]*\).*/\1/')
echo "reload $last: analysis forward loss $reloaded, trainer val loss $trained"
awk -v a="$reloaded" -v b="$trained" 'BEGIN { d = a - b; if (d < 0) d = -d; if (d / b > 1e-5) { print "FAIL: rel diff " d / b; exit 1 } print "rel diff " d / b }'
