#!/usr/bin/env python3
"""Python overhead of kolo.torch (the Horovod API) at 2 ranks, in one run.

  1. hvd.allreduce of a 1-element f32 tensor: median (and 10th/90th
     percentile) per call over --calls calls, beside the same allreduce
     through the bare binding (kolo._C, no torch) — the C++ call plus
     pybind11's argument conversion — and kolo-bench's 4-byte allreduce.
  2. hvd.allreduce_ (in place, Sum) of 64 MiB f32 beside kolo-bench's in-place
     sum allreduce of 64 MiB, and their ratio.
kolo-bench and the Python side alternate --reps times; medians of the rounds.

  bench/python/overhead.py [--build build] [--np 2] [--calls 10000] [--reps 3] [--out FILE]
The rank side (started by this script under kolorun): overhead.py --rank-side CALLS BIG_ITERS
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIG = 64 << 20


def timed(fn, n):
    """fn's duration in ns, n times."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out


def print_cases(results):
    """One parseable line per case: median and 10th/90th percentiles in us."""
    for name, t in results.items():
        t = sorted(t)
        q = lambda f: t[min(len(t) - 1, int(f * len(t)))] / 1000  # noqa: E731
        print(f"case={name.replace(' ', '_')} n={len(t)} median_us={statistics.median(t) / 1000:.3f} "
              f"p10_us={q(0.1):.3f} p90_us={q(0.9):.3f}", flush=True)


def launcher(build, np, env):
    """launch(cmd) -> output of cmd on np ranks under build's kolorun; exits on failure."""
    kolorun = os.path.join(build, "tools", "kolorun", "kolorun")

    def launch(cmd):
        p = subprocess.run([kolorun, "-np", str(np), "--no-tag-output", *cmd], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
        return p.stdout
    return launch


def kolo_bench_us(launch, build, size, inplace):
    """kolo-bench's mean time of one f32 sum allreduce of size bytes."""
    bench = os.path.join(build, "tools", "kolo-bench", "kolo-bench")
    out = launch([bench, "-c", "allreduce", "--sizes", str(size), "-d", "f32", "-o", "sum",
                  *(["--inplace"] if inplace else []), "--anchor-format"])
    return float(re.search(rf"^kolo n=\d+ bytes={size} time_us=([\d.]+)", out, re.M).group(1))


def arguments(calls):
    """The options every overhead benchmark takes (each adds its --python)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--calls", type=int, default=calls)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    return ap


def report(lines, out):
    """Prints the result lines and writes them to out (a bench/results file) when given."""
    print("\n".join(lines), flush=True)
    if out:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")


def rank_side(calls, big_iters):
    import torch
    import kolo.torch as hvd
    from kolo import _C, basics

    hvd.init()
    torch.set_num_threads(1)

    one = torch.ones(1)
    comm, ptr = basics.comm(), one.data_ptr()
    cases = {"hvd.allreduce": lambda: hvd.allreduce(one),
             "binding allreduce": lambda: comm.allreduce(ptr, ptr, 1, _C.F32, _C.SUM)}
    for fn in cases.values():
        timed(fn, max(100, calls // 10))  # warm-up
    results = {name: sorted(timed(fn, calls)) for name, fn in cases.items()}
    big = torch.ones(BIG // 4)
    hvd.allreduce_(big, op=hvd.Sum)
    results["hvd.allreduce_ 64MiB"] = sorted(timed(lambda: hvd.allreduce_(big, op=hvd.Sum), big_iters))
    if hvd.rank() == 0:
        print_cases(results)


def main():
    ap = arguments(10000)
    ap.add_argument("--big-iters", type=int, default=20)
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the Python (and so the torch) of every rank, e.g. a venv of scripts/install-torch.sh")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(HERE, "..", "torch"))
    from compare import machine, torch_of  # bench/torch/compare.py
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.abspath(os.path.join(a.build, "python")) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    launch = launcher(a.build, a.np, env)

    def kolo_bench(size):
        return kolo_bench_us(launch, a.build, size, inplace=True)

    def python_side():
        out = launch([a.python, os.path.abspath(__file__), "--rank-side", str(a.calls),
                      str(a.big_iters)])
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^case=(\S+) .*median_us=([\d.]+)", out, re.M)}

    rounds = []
    for _ in range(a.reps):
        py = python_side()
        rounds.append(dict(py, kb4=kolo_bench(4), kb64=kolo_bench(BIG)))
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    lines = [f"# kolo.torch Python overhead, {a.np} ranks, {a.reps} alternating rounds; medians",
             f"# machine: {machine()}",
             f"# {torch_of(a.python)}",
             f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average: {os.getloadavg()[0]:.2f}",
             f"hvd.allreduce 1 x f32:            {med['hvd.allreduce']:10.2f} us per call (median of {a.calls})",
             f"binding allreduce 1 x f32:        {med['binding_allreduce']:10.2f} us per call",
             f"kolo-bench allreduce 4 B:         {med['kb4']:10.2f} us (its mean per op)",
             f"hvd.allreduce_ 64 MiB f32 sum:    {med['hvd.allreduce__64MiB']:10.0f} us (median of {a.big_iters})",
             f"kolo-bench allreduce 64 MiB:      {med['kb64']:10.0f} us",
             f"hvd / kolo-bench at 64 MiB:       {med['hvd.allreduce__64MiB'] / med['kb64']:10.3f}",
             f"# rounds: {rounds}"]
    report(lines, a.out)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank-side":
        rank_side(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
