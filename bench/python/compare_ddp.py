#!/usr/bin/env python3
"""The same DDP program on backend "kolo" and on "gloo", and the Horovod-API
version beside them, in one run.

The DDP program is the anchor /work/shared/anchors/ddp_fashion_mnist.py
(BACKEND=kolo imports kolo.torch and calls init_process_group("kolo")); both
backends are started the same way, by launch_torch.sh (MASTER_ADDR/PORT,
RANK, WORLD_SIZE). The Horovod-API program is bench/python/horovod_step.py
(the same step with hvd.DistributedOptimizer) under kolorun. For each model
(cnn, mlp) and rank count (1, 2) the three alternate REPS times; medians,
samples/s and ratios to gloo. 1 thread per rank, OPENBLAS_NUM_THREADS=1.
At 1 rank the anchor builds no DDP (the same program on either backend): the
row is the baseline for scaling. The ceiling column is the machine's bound
for any backend at 2 ranks: two independent 1-rank runs of the anchor at once
(no communication; only the cores, caches and memory bandwidth they share).

  bench/python/compare_ddp.py [--build build] [--reps 5] [--steps 40] [--batch 32] [--out FILE]

glibc's malloc tunables in the environment reach every program alike (the
header names them): bench/torch/compare.py runs the DDP anchor with
MALLOC_MMAP_THRESHOLD_=MALLOC_TRIM_THRESHOLD_=1073741824, which keeps glibc
from mapping and unmapping every large tensor (a page fault per 4 KiB touched,
costly on this VM); run this script with and without them.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
from compare import ANCHORS, machine, reporter, run, run_pair, save, torch_of  # noqa: E402  (bench/torch/compare.py)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--models", default="cnn,mlp")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the Python (and so the torch) of every rank, e.g. a venv of scripts/install-torch.sh")
    ap.add_argument("--out")
    a = ap.parse_args()
    kolorun = os.path.join(a.build, "tools", "kolorun", "kolorun")
    pythonpath = os.path.abspath(os.path.join(a.build, "python"))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", THREADS="1",
               BATCH=str(a.batch), STEPS=str(a.steps),
               PYTHONPATH=pythonpath + os.pathsep + os.environ.get("PYTHONPATH", ""))
    say, lines = reporter()

    def ddp(backend, model, n):
        e = dict(env, MODEL=model, BACKEND=backend)
        return run([f"{ANCHORS}/launch_torch.sh", str(n), a.python,
                    f"{ANCHORS}/ddp_fashion_mnist.py"], e)[0]

    def hvd(model, n):
        return run([kolorun, "-np", str(n), a.python, os.path.join(HERE, "horovod_step.py")],
                   dict(env, MODEL=model))[0]

    say("# DDP on backend kolo vs gloo (same program), and kolo's Horovod API; Fashion-MNIST step")
    say(f"# machine: {machine()}")
    say(f"# {torch_of(a.python)}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    say(f"# batch {a.batch}/rank, 1 thread/rank, {a.reps} alternating repetitions of {a.steps} timed steps; medians")
    tunables = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("MALLOC_"))
    say(f"# glibc malloc tunables (every program alike): {tunables or 'none (glibc defaults)'}")
    say()
    def ceiling(model):
        e = dict(env, MODEL=model, BACKEND="gloo")
        return run_pair([f"{ANCHORS}/launch_torch.sh", "1", a.python, f"{ANCHORS}/ddp_fashion_mnist.py"], e)

    say(f"{'model':5} {'ranks':>5} {'gloo':>8} {'kolo':>8} {'hvd':>8} {'ceiling':>8} {'kolo/gloo':>10} "
        f"{'hvd/gloo':>9} {'ceiling/gloo':>13}   runs (gloo | kolo | hvd | ceiling)")
    for model in a.models.split(","):
        for n in map(int, a.ranks.split(",")):
            g, k, h, c = [], [], [], []
            for _ in range(a.reps):
                g.append(ddp("gloo", model, n))
                k.append(ddp("kolo", model, n))
                h.append(hvd(model, n))
                if n == 2:
                    c.append(ceiling(model))
            mg, mk, mh = (statistics.median(v) for v in (g, k, h))
            mc = statistics.median(c) if c else float("nan")
            say(f"{model:5} {n:5d} {mg:8.0f} {mk:8.0f} {mh:8.0f} {mc:8.0f} {mk / mg:9.2f}x {mh / mg:8.2f}x "
                f"{mc / mg:12.2f}x   {g} | {k} | {h} | {c}")
    say(f"# samples/s; load average at end: {os.getloadavg()[0]:.2f}")
    save(lines, a.out)


if __name__ == "__main__":
    main()
