#!/usr/bin/env python3
"""Where a 2-rank DDP step's time goes: the anchor's step (same models, per-rank
batch, SGD, data slicing as ../shared/anchors/ddp_fashion_mnist.py) timed in
phases with three amounts of communication, on backend "kolo" and "gloo":

  none  DDP under no_sync() (forward included, so the reducer is never armed):
        no collective and no bucket copies, only the ranks' compute
  sync  DDP as in training (every gradient copied into its bucket and, after
        the bucket's hook, back) with a comm hook that allreduces one element
        per bucket instead of the bucket: all that DDP does except the
        backend moving the gradients; the ranks still wait for each other
  full  DDP as shipped: every bucket allreduced (DDP folds the division by
        the world size into the copy into the bucket, so it costs no pass)

beside the machine's ceiling ("pair": two independent 1-rank runs at once, no
DDP). So sync - none is what DDP's bucket copies and waiting for the slower
rank cost, whatever the backend, and full - sync what the backend's
allreduces cost: a backend can at best bring full down to sync, which bounds
its speedup over another backend's full. Rank 0 reports; medians over --reps
rounds, variants in rotating order.

  bench/python/ddp_step_parts.py [--build build] [--models cnn,mlp] [--reps 3] [--steps 40] [--out FILE]

Under launch_torch.sh (RANK in the environment) it is the rank program:
env MODEL, BACKEND, MODE (none, sync, full), STEPS, BATCH.
"""
import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))

PHASES = ("step", "fwd", "bwd", "bwd_cpu", "opt", "cpu")


def rank_program():
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from anchor_models import model as anchor_model
    from fashion_mnist_data import DEFAULT_DIR, MEAN, STD, dataset

    backend, mode = os.environ.get("BACKEND", "gloo"), os.environ.get("MODE", "full")
    if backend == "kolo":
        import kolo.torch  # noqa: F401  (registers the backend)
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    X, Y = dataset(DEFAULT_DIR, "train").tensors
    X = X * STD + MEAN  # the anchor trains on unnormalised [0, 1] pixels
    torch.manual_seed(0)
    model = anchor_model(os.environ.get("MODEL", "cnn"))
    if ws > 1:
        dist.init_process_group(backend)
        model = nn.parallel.DistributedDataParallel(model)
        if mode == "sync":
            one = torch.zeros(1)

            def sync_only(state, bucket):
                fut = dist.all_reduce(one, async_op=True).get_future()
                return fut.then(lambda _: bucket.buffer())
            model.register_comm_hook(None, sync_only)
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * ws, momentum=0.9)
    # forward too runs under no_sync(): DDP arms its reducer in forward.
    quiet = model.no_sync if ws > 1 and mode == "none" else contextlib.nullcontext
    B, steps = int(os.environ.get("BATCH", "32")), int(os.environ.get("STEPS", "40"))
    idx = torch.arange(rank, len(X), ws)
    spent = dict.fromkeys(PHASES, 0.0)
    for s in range(steps + 5):
        if s == 5:
            spent = dict.fromkeys(PHASES, 0.0)
            t_run, cpu_run = time.perf_counter(), time.process_time()
        start = (s * B) % (len(idx) - B)
        b = idx[start:start + B]
        t0 = time.perf_counter()
        opt.zero_grad()
        with quiet():
            loss = F.cross_entropy(model(X[b]), Y[b])
            t1, c1 = time.perf_counter(), time.thread_time()
            loss.backward()
        t2, c2 = time.perf_counter(), time.thread_time()
        opt.step()
        t3 = time.perf_counter()
        spent["fwd"] += t1 - t0
        spent["bwd"] += t2 - t1
        spent["bwd_cpu"] += c2 - c1
        spent["opt"] += t3 - t2
    spent["step"] = time.perf_counter() - t_run
    spent["cpu"] = time.process_time() - cpu_run
    if rank == 0:
        print("parts " + " ".join(f"{k}_ms={v / steps * 1e3:.2f}" for k, v in spent.items()), flush=True)
    if ws > 1:
        dist.destroy_process_group()


def parse(out, cmd):
    m = re.search(r"parts (.*)", out)
    if not m:
        sys.exit(f"failed: {' '.join(cmd)}\n{out}")
    return {k[:-3]: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def driver():
    from compare import ANCHORS, machine, reporter, finish, torch_of
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="cnn,mlp")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the Python (and so the torch) of every rank, e.g. a venv of scripts/install-torch.sh")
    ap.add_argument("--out")
    a = ap.parse_args()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", STEPS=str(a.steps), BATCH="32",
               PYTHONPATH=os.path.abspath(os.path.join(a.build, "python")) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    launch = [f"{ANCHORS}/launch_torch.sh"]
    me = [a.python, os.path.abspath(__file__)]

    def run(n, e, copies=1):
        """copies independent launches of n ranks at once; rank 0's phases, averaged over copies."""
        cmd = launch + [str(n)] + me
        ps = [subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(copies)]
        outs = [parse(p.communicate()[0], cmd) for p in ps]
        return {k: statistics.mean(o[k] for o in outs) for k in PHASES}

    say, lines = reporter()
    say("# Where a 2-rank DDP step's time goes (bench/python/ddp_step_parts.py)")
    say(f"# machine: {machine()}")
    say(f"# {torch_of(a.python)}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    tunables = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("MALLOC_"))
    say(f"# batch 32/rank, 1 thread/rank, {a.steps} timed steps, medians of {a.reps} rounds (rotating order); "
        f"malloc tunables: {tunables or 'none'}")
    say("# ms per step on rank 0: step = fwd + bwd + opt (+ zero_grad); bwd_cpu is the main thread's CPU in "
        "backward, cpu the whole process's per step")
    say()
    variants = [("pair (ceiling)", None, None)] + [(f"{b} {m}", b, m) for b in ("gloo", "kolo")
                                                   for m in ("none", "sync", "full")]
    for model in a.models.split(","):
        got = {name: [] for name, _, _ in variants}
        for r in range(a.reps):
            for name, backend, mode in variants[r % len(variants):] + variants[:r % len(variants)]:
                e = dict(env, MODEL=model, BACKEND=backend or "gloo", MODE=mode or "full")
                got[name].append(run(1, e, copies=2) if backend is None else run(2, e))
        say(f"{model}: {'variant':16} " + " ".join(f"{p:>8}" for p in PHASES) + "   step per round")
        for name, _, _ in variants:
            med = {p: statistics.median(x[p] for x in got[name]) for p in PHASES}
            say(f"{model}: {name:16} " + " ".join(f"{med[p]:8.1f}" for p in PHASES) + "   "
                + " ".join(f"{x['step']:.1f}" for x in got[name]))
        say()
    finish(say, lines, a.out)


if __name__ == "__main__":
    rank_program() if "RANK" in os.environ else driver()
