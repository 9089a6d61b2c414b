#!/usr/bin/env python3
"""What a named operation costs beside an unnamed one, kolo.torch at 2 ranks.

Cases, each a median over --calls calls (rank 0's clock):
  unnamed      hvd.allreduce of 8 bytes (2 x f32): the ordered, direct path
  named        the same with name="x" every call: one negotiation round from
               the response cache, then the allreduce (comm/named_channel.h)
  step16 unnamed / named
               one "step": 16 allreduce_async of 8 bytes then synchronize all;
               named, rank 1 issues them in reverse order; per operation
Several builds (--build, repeated) run in alternating rounds (--reps), so a
build before the named channel (which has only the unnamed cases) and one
after are compared on the same machine state; medians of the rounds.

  bench/python/named_cost.py --build /path/before/build --build build [--reps 5]
The rank side: named_cost.py --rank-side CALLS
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from overhead import launcher, print_cases, timed  # noqa: E402


def rank_side(calls):
    import torch
    import kolo.torch as hvd
    from kolo import _C

    hvd.init()
    torch.set_num_threads(1)
    named = hasattr(_C.Communicator, "set_joined")  # a build with the named channel
    t = torch.ones(2)
    ts = [torch.ones(2) for _ in range(16)]
    order = list(range(16))
    if hvd.rank() == 1:
        order.reverse()

    def step(names):
        hs = [hvd.allreduce_async(ts[i], name=f"g{i}" if names else None) for i in order]
        for h in hs:
            hvd.synchronize(h)

    cases = {"unnamed": lambda: hvd.allreduce(t), "step16_unnamed": lambda: step(False)}
    if named:
        cases["named"] = lambda: hvd.allreduce(t, name="x")
        cases["step16_named"] = lambda: step(True)
    if not named:  # before the named channel, unnamed steps must keep one order
        order.sort()
    results = {}
    for name, fn in cases.items():
        n = calls // 16 if name.startswith("step") else calls
        timed(fn, max(50, n // 10))  # warm-up (and the response cache)
        results[name] = [x / (16 if name.startswith("step") else 1) for x in timed(fn, n)]
    if hvd.rank() == 0:
        print_cases(results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", required=True)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--python", default="/usr/bin/python3")
    a = ap.parse_args()
    rounds = {b: [] for b in a.build}
    for _ in range(a.reps):
        for b in a.build:
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                       PYTHONPATH=os.path.abspath(os.path.join(b, "python")))
            out = launcher(b, a.np, env)([a.python, os.path.abspath(__file__), "--rank-side", str(a.calls)])
            rounds[b].append({m.group(1): float(m.group(2))
                              for m in re.finditer(r"^case=(\S+) .*median_us=([\d.]+)", out, re.M)})
    print(f"# named vs unnamed kolo.torch allreduce of 8 bytes, {a.np} ranks, {a.reps} alternating rounds "
          f"of {a.calls} calls; medians of the rounds' medians (us per operation)")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    for b, rs in rounds.items():
        cases = sorted(set().union(*rs))
        print(f"{b}: " + "  ".join(f"{c}={statistics.median(r[c] for r in rs if c in r):.2f}" for c in cases))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--rank-side":
        rank_side(int(sys.argv[2]))
    else:
        main()
