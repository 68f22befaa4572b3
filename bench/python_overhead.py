#!/usr/bin/env python3
"""What calling sinkscope from Python costs against the CLI, for `analyze` on stories260K.

Runs, interleaved and repeated, (a) `sinkscope analyze ... --json FILE` as a process and (b) the
same analysis from Python (sinkscope.load + sinkscope.analyze + to_json) as a process, and reports
median wall times and their ratio; also the in-process time of the analyze call against the CLI's.
The JSON documents of both are checked to be equal. Usage (from the repository root, after
scripts/setup.sh):

    PYTHONPATH=build/python python3 bench/python_overhead.py [--reps 5] [--samples 64] [--length 256]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=str(ROOT / "build/src/cli/sinkscope"))
    ap.add_argument("--model", default=str(ROOT / "models/stories260K/stories260K.bin"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--length", type=int, default=256)
    args = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp())
    cli_json, py_json = tmp / "cli.json", tmp / "py.json"
    cli = [args.cli, "analyze", "--model", args.model, "--samples", str(args.samples), "--length",
           str(args.length), "--json", str(cli_json)]
    code = f"""
import time, sinkscope
t0 = time.perf_counter()
m = sinkscope.load({args.model!r})
t1 = time.perf_counter()
r = sinkscope.analyze(m, samples={args.samples}, length={args.length})
t2 = time.perf_counter()
open({str(py_json)!r}, "w").write(r.to_json())
print(t1 - t0, t2 - t1)
"""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "build/python"), env.get("PYTHONPATH")]))
    cli_wall, py_wall, py_call = [], [], []
    for _ in range(args.reps):
        t = time.perf_counter()
        subprocess.run(cli, check=True, capture_output=True)
        cli_wall.append(time.perf_counter() - t)
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                             env=env)
        py_wall.append(time.perf_counter() - t)
        py_call.append(float(out.stdout.split()[1]))
    a, b = json.loads(cli_json.read_text()), json.loads(py_json.read_text())
    same = a == b
    c, p, pc = (statistics.median(x) for x in (cli_wall, py_wall, py_call))
    print(f"analyze stories260K, 4 conditions x {args.samples} samples x T = {args.length}, "
          f"{args.reps} runs each, interleaved (medians)")
    print(f"  CLI process                 {c:8.3f} s")
    print(f"  Python process (import, load, analyze, to_json) {p:8.3f} s   ratio {p / c:.3f}")
    print(f"  Python analyze() call alone {pc:8.3f} s   ratio to the CLI process {pc / c:.3f}")
    print(f"  JSON documents equal: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
