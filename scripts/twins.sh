#!/usr/bin/env bash
# Twins (issue 17): the same training run (data, seed, schedule: every argument after --) under
# several attention variants, then one comparison of their final telemetry.
#
#   scripts/twins.sh OUT softmax,softmax1,sink-logit,gated,kv-bias,sigmoid [--jobs N] -- TRAIN ARGUMENTS...
#
# Each variant trains into OUT/<variant> (its log in OUT/<variant>.log) with
# `sinkscope train TRAIN ARGUMENTS --set attention=<variant> --out OUT/<variant>`, N at a time
# (default 1; with N > 1 give the runs --threads 1). Then OUT/comparison.json and
# OUT/comparison.md hold, per variant, the last evaluation's validation loss (and on
# Bigram-Backcopy the loss after triggers and elsewhere), alpha_0, alpha_1 (sigmoid attention: of
# the weights divided by their row sums, and also the weights themselves: alpha0_raw, row_sum),
# the sink slot's mass,
# the output gate at position 0 and elsewhere, and position 0's norm ratio, averaged over layers,
# the largest activation over its median (the largest layer's; Sun et al.'s massive activations),
# plus the first evaluation step at which any layer's sink rate reached 0.5; OUT/comparison.html
# has the table and the variants' curves over the steps overlaid (self-contained, inline SVG).
# The sinkscope binary: $SINKSCOPE, else `sinkscope` on PATH, else this checkout's build.
# An OUT that exists and is not empty is refused (nothing is overwritten); a variant that fails
# stops the script with its log's last lines and no comparison.
set -euo pipefail

usage() { echo "usage: scripts/twins.sh OUT VARIANT[,VARIANT...] [--jobs N] -- TRAIN ARGUMENTS..." >&2; exit 2; }
[ $# -ge 3 ] || usage
out=$1
IFS=',' read -r -a variants <<< "$2"
shift 2
jobs=1
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in
    --jobs) [ $# -ge 2 ] || usage; jobs=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ "${1:-}" = "--" ] || usage
shift
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "twins: --jobs must be a positive integer, found '$jobs'" >&2; exit 2; }
[ ${#variants[@]} -ge 1 ] || usage
for a in "$@"; do
  case $a in
    --out|--out=*) echo "twins: give no --out: each variant writes OUT/<variant>" >&2; exit 2 ;;
    attention=*) echo "twins: give no --set attention=...: the variants list sets it" >&2; exit 2 ;;
  esac
done
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "twins: $out exists and is not empty; choose another OUT" >&2
  exit 1
fi

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${SINKSCOPE:-}
if [ -z "$bin" ]; then
  if command -v sinkscope > /dev/null; then bin=sinkscope; else bin=$here/build/src/cli/sinkscope; fi
fi
mkdir -p "$out"

running=0
declare -A pids
for v in "${variants[@]}"; do
  if [ $running -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  echo "twins: training $v -> $out/$v" >&2
  "$bin" train "$@" --set "attention=$v" --out "$out/$v" > "$out/$v.log" 2>&1 &
  pids[$v]=$!
  running=$((running + 1))
done
failed=0
for v in "${variants[@]}"; do
  if ! wait "${pids[$v]}"; then
    echo "twins: variant $v failed; the end of $out/$v.log:" >&2
    tail -n 5 "$out/$v.log" >&2
    failed=1
  fi
done
[ $failed -eq 0 ] || exit 1

/usr/bin/env python3 - "$out" "${variants[@]}" <<'EOF'
import json
import os
import sys

out, variants = sys.argv[1], sys.argv[2:]
rows = []
for v in variants:
    lines = [json.loads(l) for l in open(os.path.join(out, v, "telemetry.jsonl")) if l.strip()]
    if not lines:
        sys.exit(f"twins: {out}/{v}/telemetry.jsonl is empty")
    last = lines[-1]
    mean = lambda key: sum(last[key]) / len(last[key]) if key in last else None
    top = lambda key: max(last[key]) if key in last else None
    onset = next((t["step"] for t in lines if max(t["sink_rate"]) >= 0.5), None)
    rows.append({"variant": v, "step": last["step"], "tokens": last["tokens"],
                 "val_loss": last["val_loss"], "trigger_loss": last.get("trigger_loss"),
                 "other_loss": last.get("other_loss"), "alpha0": mean("alpha0"),
                 "alpha1": mean("alpha1"), "alpha_sink": mean("alpha_sink"),
                 "alpha0_raw": mean("alpha0_raw"), "row_sum": mean("row_sum"),
                 "gate_p0": mean("gate_p0"), "gate_rest": mean("gate_rest"),
                 "p0_norm_ratio": mean("p0_norm_ratio"), "top_abs_ratio": top("top_abs_ratio"),
                 "first_sink_step": onset})
with open(os.path.join(out, "comparison.json"), "w") as f:
    json.dump({"schema": "sinkscope.twins/1", "runs": rows}, f, indent=1)
cols = ["variant", "step", "val_loss", "trigger_loss", "other_loss", "alpha0", "alpha1",
        "alpha0_raw", "row_sum", "alpha_sink", "gate_p0", "gate_rest", "p0_norm_ratio", "top_abs_ratio", "first_sink_step"]
fmt = lambda x: "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))
text = "| " + " | ".join(cols) + " |\n|" + " --- |" * len(cols) + "\n"
for r in rows:
    text += "| " + " | ".join(fmt(r[c]) for c in cols) + " |\n"
open(os.path.join(out, "comparison.md"), "w").write(text)

# comparison.html: the table and one chart per metric with every variant's curve over the steps
# (self-contained: inline SVG, no script).
series = {v: [json.loads(l) for l in open(os.path.join(out, v, "telemetry.jsonl")) if l.strip()]
          for v in variants}
colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
def value(t, key):
    x = t.get(key)
    return sum(x) / len(x) if isinstance(x, list) and x else x
def chart(key, title):
    pts = {v: [(t["step"], value(t, key)) for t in ts if value(t, key) is not None]
           for v, ts in series.items()}
    allp = [p for ps in pts.values() for p in ps]
    if not allp:
        return ""
    x0, x1 = min(p[0] for p in allp), max(p[0] for p in allp)
    y0, y1 = min(p[1] for p in allp), max(p[1] for p in allp)
    if x1 == x0: x1 = x0 + 1
    if y1 == y0: y1 = y0 + 1e-9
    W, H, m = 430, 220, 56
    sx = lambda x: m + (x - x0) / (x1 - x0) * (W - 2 * m)
    sy = lambda y: H - m + (y0 - y) / (y1 - y0) * (H - 2 * m)
    svg = [f'<svg width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg" font-size="11">',
           f'<text x="{m}" y="16">{title}</text>',
           f'<line x1="{m}" y1="{H-m}" x2="{W-m}" y2="{H-m}" stroke="#999"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{H-m}" stroke="#999"/>',
           f'<text x="{m}" y="{H-m+14}">{x0}</text><text x="{W-m}" y="{H-m+14}" text-anchor="end">{x1} steps</text>',
           f'<text x="{m-4}" y="{H-m}" text-anchor="end">{y0:.3g}</text><text x="{m-4}" y="{m+4}" text-anchor="end">{y1:.3g}</text>']
    for i, (v, ps) in enumerate(pts.items()):
        if ps:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ps)
            svg.append(f'<polyline fill="none" stroke="{colours[i % len(colours)]}" stroke-width="1.5" points="{path}"/>')
    svg.append("</svg>")
    return "".join(svg)
legend = " ".join(f'<span style="color:{colours[i % len(colours)]}">&#9632; {v}</span>' for i, v in enumerate(variants))
rows_html = "".join("<tr>" + "".join(f"<td>{fmt(r[c])}</td>" for c in cols) + "</tr>" for r in rows)
charts = "".join(chart(k, t) for k, t in [
    ("val_loss", "validation loss"), ("trigger_loss", "loss after triggers"),
    ("alpha0", "alpha_0 (mean over layers)"), ("alpha_sink", "alpha_sink (sink slot)"),
    ("gate_rest", "output gate at positions >= 1"), ("p0_norm_ratio", "P0 norm ratio"),
    ("top_abs_ratio", "largest |activation| / median (mean over layers)")])
html = f"""<!doctype html><meta charset="utf-8"><title>sinkscope twins: {out}</title>
<body style="font-family:sans-serif"><h1>Twins: {", ".join(variants)}</h1>
<table border="1" cellspacing="0" cellpadding="3"><tr>{"".join(f"<th>{c}</th>" for c in cols)}</tr>{rows_html}</table>
<p>{legend}</p><div>{charts}</div></body>"""
open(os.path.join(out, "comparison.html"), "w").write(html)
sys.stdout.write(text)
EOF
