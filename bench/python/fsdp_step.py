#!/usr/bin/env python3
"""FSDP2 on backend "kolo" vs on "gloo": the same training step, 2 ranks, in one run.

The anchor's two models (bench/python/anchor_models.py: the CNN conv32-conv64-
fc128, 1.2 M parameters, and the communication-heavy MLP 784-4096-4096-10,
20.3 M), each layer wrapped by ``fully_shard`` and then the root (torch's
recipe: every layer a unit whose all-gather and reduce-scatter overlap the
others' compute), SGD as in the anchor (lr 0.01 x ranks, momentum 0.9). Both
backends are started the same way, by ../shared/anchors/launch_torch.sh
(MASTER_ADDR/PORT, RANK, WORLD_SIZE; BACKEND=kolo imports kolo.torch), one
torch thread per rank, OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1. The runs
alternate gloo/kolo, the first backend swapping every repetition.

Data: seeded random 1x28x28 images and labels (Fashion-MNIST's shape), the
same on either backend, generated per rank; not the dataset itself, whose
loading (188 MB of float32 plus conversion copies) would set each process's
memory high-water mark before training starts and hide what FSDP uses.

Measured per rank:
  step ms    the median of the timed steps' wall times (forward, backward with
             FSDP's reduce-scatters, optimizer step); the table takes the
             slower rank's median per run, then the median over runs
  peak MiB   the process's peak resident set (getrusage ru_maxrss) at the end
  growth MiB ru_maxrss at the end minus ru_maxrss just before the model was
             built (after torch, the group and the data): the high-water mark
             that the model, FSDP's unsharded parameters and gradients, the
             optimizer and the backend's buffers add. RSS, not tracemalloc:
             torch allocates tensors in C++, which tracemalloc does not see.

  bench/python/fsdp_step.py [--build build] [--python PY] [--models mlp,cnn] [--reps 5]
                            [--steps 30] [--batch 32] [--out FILE]

Under launch_torch.sh (RANK in the environment) it is the rank program:
env MODEL, BACKEND, STEPS, WARMUP, BATCH.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
TORCH2 = os.path.expanduser("~/.cache/kolo/venvs/torch-2.15.0/bin/python")


def rank_program():
    import resource

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.distributed.fsdp import fully_shard

    from anchor_models import model as anchor_model

    backend, kind = os.environ.get("BACKEND", "gloo"), os.environ.get("MODEL", "mlp")
    steps, warmup = int(os.environ.get("STEPS", "30")), int(os.environ.get("WARMUP", "5"))
    B = int(os.environ.get("BATCH", "32"))
    if backend == "kolo":
        import kolo.torch  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group(backend)
    rank, ws = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(1000 + rank)
    X = torch.randn((warmup + steps) * B, 1, 28, 28, generator=g)
    Y = torch.randint(0, 10, ((warmup + steps) * B,), generator=g)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    torch.manual_seed(0)
    model = anchor_model(kind)
    for layer in model.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * ws, momentum=0.9)
    times = []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(X[s * B:(s + 1) * B]), Y[s * B:(s + 1) * B])
        loss.backward()
        opt.step()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # One write per line: the ranks share launch_torch.sh's stdout, and print()
    # writes the text and its newline apart (lines of two ranks ran together).
    sys.stdout.write(f"fsdp-step backend={backend} model={kind} rank={rank} n={ws} batch={B} "
                     f"step_ms={statistics.median(times) * 1e3:.2f} peak_mib={peak / 1024:.1f} "
                     f"growth_mib={(peak - before) / 1024:.1f} loss={loss.item():.6f}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


_LINE = re.compile(r"fsdp-step backend=\S+ model=\S+ rank=(\d+) .*step_ms=([\d.]+) peak_mib=([\d.]+) "
                   r"growth_mib=([-\d.]+) loss=(\S+)$", re.M)


def main():
    from compare import ANCHORS, machine, reporter, save, torch_of  # bench/torch/compare.py

    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--python", default=os.environ.get("KOLO_TORCH2_PYTHON", TORCH2),
                    help="the Python of every rank (torch 2.x: FSDP2); default: %(default)s")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out")
    a = ap.parse_args()
    n = 2
    pythonpath = os.path.abspath(os.path.join(a.build, "python"))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", STEPS=str(a.steps),
               WARMUP=str(a.warmup), BATCH=str(a.batch),
               PYTHONPATH=os.pathsep.join([pythonpath, HERE, os.environ.get("PYTHONPATH", "")]))
    say, lines = reporter()

    def one(backend, model):
        """[(step ms, peak MiB, growth MiB, loss)] by rank for one run."""
        cmd = [f"{ANCHORS}/launch_torch.sh", str(n), a.python, os.path.abspath(__file__)]
        p = subprocess.run(cmd, env=dict(env, BACKEND=backend, MODEL=model), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        found = {int(m.group(1)): tuple(map(float, m.groups()[1:])) for m in _LINE.finditer(p.stdout)}
        if p.returncode != 0 or sorted(found) != list(range(n)):
            sys.exit(f"fsdp_step: {backend} {model} failed (exit {p.returncode}):\n{p.stdout[-4000:]}")
        return [found[r] for r in range(n)]

    say("# FSDP2 (fully_shard per layer) on backend kolo vs gloo, same program and data, 2 ranks")
    say(f"# machine: {machine()}")
    say(f"# {torch_of(a.python)}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    say(f"# batch {a.batch}/rank, 1 thread/rank, {a.reps} alternating repetitions of {a.warmup} warm-up + "
        f"{a.steps} timed steps; step ms: the slower rank's median step, median over runs; "
        "memory: ru_maxrss per rank (peak) and its growth from before the model was built, medians over runs")
    tunables = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("MALLOC_"))
    say(f"# glibc malloc tunables (both backends alike): {tunables or 'none (glibc defaults)'}")
    say()
    say(f"{'model':5} {'gloo ms':>8} {'kolo ms':>8} {'gloo/kolo':>9}   "
        f"{'peak MiB r0,r1 gloo':>20} {'kolo':>14}   {'growth MiB r0,r1 gloo':>22} {'kolo':>14}   "
        "losses equal   runs ms (gloo | kolo)")
    for model in a.models.split(","):
        res = {"gloo": [], "kolo": []}
        for rep in range(a.reps):
            for backend in (("gloo", "kolo") if rep % 2 == 0 else ("kolo", "gloo")):
                res[backend].append(one(backend, model))
        step = {b: [max(r[0] for r in run) for run in runs] for b, runs in res.items()}
        med = {b: statistics.median(v) for b, v in step.items()}

        def mem(b, i):
            return ",".join(f"{statistics.median(run[r][i] for run in res[b]):.0f}" for r in range(n))
        same = all(g[r][3] == k[r][3] for g, k in zip(res["gloo"], res["kolo"]) for r in range(n))
        say(f"{model:5} {med['gloo']:8.1f} {med['kolo']:8.1f} {med['gloo'] / med['kolo']:8.2f}x   "
            f"{mem('gloo', 1):>20} {mem('kolo', 1):>14}   {mem('gloo', 2):>22} {mem('kolo', 2):>14}   "
            f"{'yes' if same else 'NO':>12}   {[round(x, 1) for x in step['gloo']]} | "
            f"{[round(x, 1) for x in step['kolo']]}")
    say(f"# gloo/kolo > 1: kolo faster. losses equal: every rank's final loss the same on both "
        f"backends in every repetition. load average at end: {os.getloadavg()[0]:.2f}")
    save(lines, a.out)


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_program()
    else:
        main()
