#!/usr/bin/env python3
"""How far apart 2 ranks leave a collective when one rank's core is loaded by
another program: what Horovod's test_global_barrier_op trips on.

Each job runs, on 2 ranks, --iters times: a named kolo.torch allreduce
(Horovod's `hvd.allreduce_(..., name=...)`), then each rank reads its clock
(time.time(); one host, one clock), rank 0 sleeps --sleep seconds, and both
call barrier(). It reports, per build and launcher, the median and largest
lag (rank 1's clock after the allreduce minus rank 0's) and how many of the
iterations rank 1's barrier took less than --sleep measured from its own clock
(Horovod's assertion). While the jobs run, --busy busy loops are pinned to
core 1 (taskset), where mpirun binds rank 1 (its default binding at 2 ranks)
and where kolorun's rank 1 may land. Builds (--build, repeated) and launchers
alternate round by round (--reps).

  bench/python/lag_under_load.py --build /path/before/build --build build [--reps 3] [--out FILE]
The rank side: lag_under_load.py --rank-side ITERS SLEEP OUT_DIR (writes rankN.json there)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
from compare import finish, machine, reporter  # noqa: E402  (bench/torch/compare.py)


def rank_side(iters, sleep, out_dir):
    import torch
    import kolo.torch as hvd

    hvd.init()
    times = []
    for it in range(iters):
        hvd.allreduce_(torch.IntTensor([1]), name=f"step{it}", op=hvd.Sum)
        start = time.time()
        if hvd.rank() == 0:
            time.sleep(sleep)
        hvd.barrier()
        times.append((start, time.time()))
    with open(os.path.join(out_dir, f"rank{hvd.rank()}.json"), "w") as f:
        json.dump(times, f)


def job(build, launcher, iters, sleep):
    """[(lag_ms, rank 1's barrier s)] of one 2-rank job."""
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(build), "python"),
               OMP_NUM_THREADS="1", KOLO_NAMED_CYCLE_US="100000")
    with tempfile.TemporaryDirectory(prefix="kolo-lag-") as out_dir:
        prog = [sys.executable, os.path.abspath(__file__), "--rank-side", str(iters), str(sleep), out_dir]
        if launcher == "mpirun":
            cmd = ["mpirun", "--allow-run-as-root", "-np", "2", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
                   "-x", "KOLO_NAMED_CYCLE_US", *prog]
        else:
            cmd = [os.path.join(build, "tools", "kolorun", "kolorun"), "-np", "2", *prog]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        ranks = {}
        for rank in (0, 1):
            try:
                with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
                    ranks[rank] = json.load(f)
            except OSError:
                pass
    if p.returncode != 0 or len(ranks) != 2:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    return [(1e3 * (b0 - a0), b1 - b0) for (a0, _), (b0, b1) in zip(ranks[0], ranks[1])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank-side", nargs=3, metavar=("ITERS", "SLEEP", "OUT_DIR"))
    ap.add_argument("--build", action="append", help="a kolo build directory (repeat to compare builds)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--sleep", type=float, default=0.5)
    ap.add_argument("--busy", type=int, default=3, help="busy loops pinned to core 1")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.rank_side:
        return rank_side(int(a.rank_side[0]), float(a.rank_side[1]), a.rank_side[2])
    builds = a.build or ["build"]
    say, lines = reporter()
    say("# 2 ranks leaving a named allreduce, then a barrier rank 0 enters --sleep s later;")
    say(f"# {a.busy} busy loops pinned to core 1 throughout")
    say(f"# machine: {machine()}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    say(f"# {a.reps} rounds of {a.iters} iterations per build and launcher; sleep {a.sleep} s")
    for i, b in enumerate(builds):
        head = subprocess.run(["git", "-C", b, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout.strip()
        say(f"# build {i}: {b} (source at {head or '?'})")
    busy = [subprocess.Popen(["taskset", "-c", "1", "sh", "-c", "while :; do :; done"]) for _ in range(a.busy)]
    seen = {}
    try:
        for rep in range(a.reps):
            for launcher in ("mpirun", "kolorun"):
                for i, b in enumerate(builds):
                    seen.setdefault((i, launcher), []).extend(job(b, launcher, a.iters, a.sleep))
            print(f"round {rep} done", flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    say()
    say(f"{'build':>5} {'launcher':8} {'lag median ms':>14} {'lag max ms':>11} {'lag > 1 ms':>11} "
        f"{'rank 1 barrier < sleep':>23}")
    for (i, launcher), rows in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lags = [lag for lag, _ in rows]
        short = sum(1 for _, t in rows if t < a.sleep)
        say(f"{i:>5} {launcher:8} {statistics.median(lags):14.3f} {max(lags):11.3f} "
            f"{sum(1 for x in lags if x > 1):>5} of {len(rows):<3} {short:>11} of {len(rows)}")
    finish(say, lines, a.out)


if __name__ == "__main__":
    main()
