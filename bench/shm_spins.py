#!/usr/bin/env python3
"""How long a waiting rank spins on shared memory: kolo's automatic choice vs
a forced KOLO_SHM_SPINS (default 200, ~5 us on the dev VM), interleaved in one
run. At 2 ranks on 2 cores kolo's choice is the long spin (20000) for blocking
collectives (kolo-bench) and a short one (50) for asynchronous ones, which
overlap the caller's compute (the training fronts): --spins 20000 is the
long spin everywhere, kolo's choice before 2026-11-24.

Each repetition runs, for both settings in turn, at 2 ranks:
  * kolo-bench allreduce (8 B, 64 KiB, 1 MiB, 64 MiB): time per call;
  * the C++ front's training step (examples/fashion_mnist --bench-steps),
    CNN and MLP, and the MLP with --no-overlap (every allreduce in step(),
    while the caller waits): samples/s;
  * the DDP anchor on backend "kolo" (../shared/anchors/ddp_fashion_mnist.py),
    CNN and MLP: samples/s.
It prints medians per setting and the median over repetitions of the paired
ratio auto / forced (time: < 1 is faster; samples/s: > 1 is faster), and for
the training runs the CPU seconds all processes of the run used (user +
system, from getrusage of the reaped children): the steps are the same work,
so CPU above the other setting's is time spent spinning. Per-rank
batch 32, one thread per rank, glibc malloc tunables as bench/torch/compare.py.

  bench/shm_spins.py [--build build] [--reps 6] [--spins 200] [--out FILE]
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "torch"))
from compare import ANCHORS, finish, machine, reporter, run  # noqa: E402  (bench/torch/compare.py)

SIZES = ["8", "64K", "1M", "64M"]


def bench_times(kolorun, build, env):
    """time_us per size of a 2-rank kolo-bench allreduce."""
    cmd = [kolorun, "-np", "2", os.path.join(build, "tools/kolo-bench/kolo-bench"), "--sizes", " ".join(SIZES)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows = re.findall(r"^\[0\]\s+(\d+)\s+\d+\s+\S+\s+\S+\s+\d+\s+([\d.]+)", p.stdout, re.M)
    if p.returncode != 0 or len(rows) != len(SIZES):
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
    return [float(t) for _, t in rows]


def cpu_of(f):
    """(f(), CPU seconds of the child processes f started and reaped)."""
    def used():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime
    before = used()
    value = f()
    return value, used() - before


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--spins", default="200", help="the forced setting compared with auto")
    ap.add_argument("--out")
    a = ap.parse_args()
    kolorun = os.path.join(a.build, "tools", "kolorun", "kolorun")
    prog = os.path.join(a.build, "examples", "fashion_mnist", "fashion_mnist")
    base = {k: v for k, v in os.environ.items() if k != "KOLO_SHM_SPINS"}
    base.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", THREADS="1", BATCH="32", STEPS=str(a.steps),
                MALLOC_MMAP_THRESHOLD_="1073741824", MALLOC_TRIM_THRESHOLD_="1073741824",
                PYTHONPATH=os.path.abspath(os.path.join(a.build, "python")) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    settings = {"auto": base, f"spins={a.spins}": dict(base, KOLO_SHM_SPINS=a.spins)}
    say, lines = reporter()
    say("# shared-memory spin before yielding: auto vs forced, 2 ranks, interleaved")
    say(f"# machine: {machine()}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    say(f"# {a.reps} repetitions; training: batch 32/rank, 1 thread/rank, {a.steps} timed steps")

    def cpp(model, env, *extra):
        return run([kolorun, "-np", "2", prog, "--model", model, "--batch", "32", "--threads", "1",
                    "--bench-steps", str(a.steps), *extra], env)[0]

    def ddp(model, env):
        return run([f"{ANCHORS}/launch_torch.sh", "2", "/usr/bin/python3", f"{ANCHORS}/ddp_fashion_mnist.py"],
                   dict(env, MODEL=model, BACKEND="kolo"))[0]

    training = [(f"C++ front {m}", cpp, m) for m in ("cnn", "mlp")]
    training += [("C++ front mlp no-overlap", lambda m, env: cpp(m, env, "--no-overlap"), "mlp")]
    training += [(f"DDP on kolo {m}", ddp, m) for m in ("cnn", "mlp")]
    cases = [f"kolo-bench {s} B time_us" for s in SIZES]
    for name, _, _ in training:
        cases += [f"{name} samples/s", f"{name} CPU s"]
    res = {name: {c: [] for c in cases} for name in settings}
    for rep in range(a.reps):
        for name, env in settings.items():
            vals = bench_times(kolorun, a.build, env)
            for _, f, model in training:
                vals += cpu_of(lambda: f(model, env))
            for c, v in zip(cases, vals):
                res[name][c].append(v)
            print(f"rep {rep} {name}: {vals}", flush=True)
    forced = f"spins={a.spins}"
    say()
    say(f"{'case':36} {'auto':>10} {forced:>12}   {'auto/forced, median of pairs':>28}   pairs")
    for c in cases:
        x, y = res["auto"][c], res[forced][c]
        ratios = [p / q for p, q in zip(x, y)]
        say(f"{c:36} {statistics.median(x):10.2f} {statistics.median(y):12.2f}   {statistics.median(ratios):28.3f}   "
            f"{[round(r, 3) for r in ratios]}")
    finish(say, lines, a.out)


if __name__ == "__main__":
    main()
