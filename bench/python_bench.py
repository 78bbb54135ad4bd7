"""python_bench.py — the Python package's overhead, side by side in one run (issue 35's speed goals):

  1. forward + backward of every attention kind at T = 8192 through phasescope.nn.Attention (a Python
     torch.nn.Module call, autograd driven from Python) against the same module's C++ loop
     (AttentionCore.time_forward_backward: forward + backward with no Python in the loop);
     goal: Python within 5% of C++.
  2. phasescope.evaluate with a Python score_fn (a loaded checkpoint's score) against the in-process C++
     backend of `phasescope eval` on the same checkpoint and layout; goal: samples/s within 10%.

Rounds are interleaved (C++, Python, C++, Python, ...); medians are reported, and the ratio of the best
rounds beside them. On a shared 2-core machine both scatter by about 10% from run to run, so the bench
also measures what Python adds per call directly: at T = 8, where the kernels cost almost nothing, 300
calls through the module against 300 in the C++ loop; "share" is that cost over the T = 8192 call's. Not a test: it asserts
nothing. Usage (scripts/bench.sh runs it):
  PYTHONPATH=python /usr/bin/python3 bench/python_bench.py [--T 8192] [--reps 3] [--checkpoint DIR] [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import torch

import phasescope

parser = argparse.ArgumentParser()
parser.add_argument("--T", type=int, default=8192)
parser.add_argument("--reps", type=int, default=3)
parser.add_argument("--kinds", default=",".join(phasescope.nn.kinds()))
parser.add_argument("--checkpoint", default="", help="a checkpoint to evaluate (default: a tiny one trained here)")
parser.add_argument("--samples", type=int, default=1152)
parser.add_argument("--json", default="", help="append result rows as JSON lines")
parser.add_argument("--skip-eval", action="store_true", help="forward+backward only")
args = parser.parse_args()
rows = []


def emit(table, **row):
    rows.append(dict(bench="python_bench", table=table, **row))


print(f"threads: {torch.get_num_threads()}")
print(f"{'kind':<12} {'C++ s':>8} {'Python s':>9} {'Python/C++':>11} {'best/best':>10} {'Python adds':>11} "
      f"{'share':>9}")
kinds = args.kinds.split(",")
if len(kinds) > 1:  # each kind in a fresh process: the allocator's state after one kind (full attention's
    # gigabytes at T = 8192) would otherwise slow the next kind's rounds unevenly
    import sys
    for kind in kinds:
        out = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
        subprocess.run([sys.executable, __file__, "--T", str(args.T), "--reps", str(args.reps), "--kinds", kind,
                        "--skip-eval", "--json", out], check=True, capture_output=True)
        row = json.loads(open(out).read().splitlines()[0])
        os.unlink(out)
        print(f"{kind:<12} {row['cpp_s']:8.3f} {row['python_s']:9.3f} {row['ratio']:10.3f}x {row['ratio_best']:9.3f}x "
              f"{1e6 * row['overhead_s']:8.0f} us {row['overhead_share']:9.5f}")
        rows.append(row)
    kinds = []
for kind in kinds:
    torch.manual_seed(0)
    m = phasescope.nn.Attention(kind=kind)
    x = torch.randn(1, args.T, m.config["d_model"])
    cpp, py = [], []
    m._core.time_forward_backward(m._params(), x, 1)  # warm-up
    for _ in range(args.reps):
        cpp.extend(m._core.time_forward_backward(m._params(), x, 1))
        m.zero_grad()
        t0 = time.perf_counter()
        m(x).sum().backward()
        py.append(time.perf_counter() - t0)
    c, p = statistics.median(cpp), statistics.median(py)
    # the per-call cost Python adds, measured where the kernels cost almost nothing (T = 8, 300 calls each)
    xs = torch.randn(1, 8, m.config["d_model"])
    t0 = time.perf_counter()
    m._core.time_forward_backward(m._params(), xs, 300)
    c_small = (time.perf_counter() - t0) / 300
    t0 = time.perf_counter()
    for _ in range(300):
        m(xs).sum().backward()
    over = (time.perf_counter() - t0) / 300 - c_small
    print(f"{kind:<12} {c:8.3f} {p:9.3f} {p / c:10.3f}x {min(py) / min(cpp):9.3f}x {1e6 * over:8.0f} us "
          f"{over / min(cpp):9.5f}")
    emit("forward+backward", kind=kind, T=args.T, cpp_s=c, python_s=p, ratio=p / c, ratio_best=min(py) / min(cpp),
         overhead_s=over, overhead_share=over / min(cpp))

# evaluate: Python score_fn vs the in-process C++ backend, the same checkpoint and layout
if args.skip_eval:
    if args.json:
        with open(args.json, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    raise SystemExit(0)
work = tempfile.mkdtemp(prefix="phasescope-python-bench-")
ckpt = args.checkpoint
if not ckpt:
    ckpt = os.path.join(work, "model")
    cli = os.environ.get("PHASESCOPE_CLI", "build/phasescope")
    subprocess.run([cli, "train", "--preset", "w8s8-1kv", "--steps", "20", "--eval-every", "0", "--out", ckpt],
                   check=True, capture_output=True)
model = phasescope.load(ckpt)
spec = json.dumps({"checkpoint": ckpt, "samples": args.samples, "residues": 24, "seed": 1, "model": "bench",
                   "bootstrap": 200})
cpp_rate, py_rate = [], []
for r in range(args.reps):
    for which in ("cpp", "python"):
        out = os.path.join(work, f"{which}{r}")
        t0 = time.perf_counter()
        if which == "cpp":
            phasescope._core.evaluate_checkpoint(spec, out)
        else:
            phasescope.evaluate(model.score, checkpoint=ckpt, samples=args.samples, out=out, model="bench",
                                bootstrap=200)
        rate = args.samples / (time.perf_counter() - t0)
        (cpp_rate if which == "cpp" else py_rate).append(rate)
c, p = statistics.median(cpp_rate), statistics.median(py_rate)
print(f"evaluate, {args.samples} prompts: C++ backend {c:.0f} samples/s, Python score_fn {p:.0f} samples/s, "
      f"Python/C++ {p / c:.3f}")
emit("evaluate", samples=args.samples, cpp_samples_s=c, python_samples_s=p, ratio=p / c)
shutil.rmtree(work, ignore_errors=True)
if args.json:
    with open(args.json, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
