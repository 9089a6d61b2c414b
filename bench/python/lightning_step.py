#!/usr/bin/env python3
"""PyTorch Lightning's DDP on backend "kolo" vs "gloo": the same job, step time, in one run.

The job: Lightning's Trainer, accelerator="cpu", devices=2, started by Lightning's
own launcher (one plain process starts the other rank: the same for both
backends), strategy "ddp_kolo" (kolo.lightning) or DDPStrategy(process_group_backend="gloo"),
on the anchor's models (anchor_models.py: the CNN, 1.2 M parameters, and the
MLP 784-4096-4096-10, 20.3 M) and Fashion-MNIST (examples/python/fashion_mnist_data.py),
SGD, batch 32 per rank, one thread per rank. A callback times each training
step on rank 0 (from one step's start to the next's: data, forward, backward
with DDP's allreduce, optimizer); the first --warmup steps are left out. For
each model the backends alternate --reps times; medians of the runs' median
step times, and gloo's time / kolo's.

  ~/.cache/kolo/venvs/torch-2.15.0/bin/python bench/python/lightning_step.py \\
      [--build build] [--reps 5] [--steps 40] [--warmup 5] [--models mlp,cnn] [--out FILE]

glibc's malloc tunables in the environment reach both backends alike (the header names them).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
sys.path.insert(0, os.path.join(REPO, "examples", "python"))
BATCH = 32


def worker(a):
    """One Lightning job (this process is rank 0, or a rank Lightning started); rank 0 prints step_ms=."""
    import torch
    import torch.nn.functional as F
    import pytorch_lightning as pl
    from pytorch_lightning.strategies import DDPStrategy
    from anchor_models import model
    from fashion_mnist_data import DEFAULT_DIR, dataset
    import kolo.lightning  # noqa: F401  registers "ddp_kolo"

    class Step(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model(a.model)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    class Timer(pl.Callback):
        """Each step's hook times: its start, before and after backward (DDP's
        allreduces finish inside backward), before the optimizer's step, its end."""
        HOOKS = ("start", "before_backward", "after_backward", "before_step", "end")

        def __init__(self):
            self.ticks = []

        def _at(self, hook):
            if hook == "start":
                self.ticks.append({})
            self.ticks[-1][hook] = time.perf_counter()

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self._at("start")

        def on_before_backward(self, trainer, module, loss):
            self._at("before_backward")

        def on_after_backward(self, trainer, module):
            self._at("after_backward")

        def on_before_optimizer_step(self, trainer, module, optimizer):
            self._at("before_step")

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self._at("end")

        def on_train_end(self, trainer, module):
            self.ticks.append({"start": time.perf_counter()})

    torch.set_num_threads(1)
    pl.seed_everything(0, verbose=False)
    steps = a.warmup + a.steps
    data = torch.utils.data.Subset(dataset(a.data_dir or DEFAULT_DIR, "train"), range(2 * BATCH * steps))
    timer = Timer()
    strategy = "ddp_kolo" if a.backend == "kolo" else DDPStrategy(process_group_backend=a.backend)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=steps, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[timer])
    trainer.fit(Step(), torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True))
    ticks = timer.ticks[a.warmup:]
    if trainer.is_global_zero:
        assert torch.distributed.get_backend() == a.backend, torch.distributed.get_backend()
        step_ms = statistics.median(1000 * (t1["start"] - t0["start"]) for t0, t1 in zip(ticks, ticks[1:]))
        # phases of a step, ms: hook to hook, the last from the step's end to the next one's start
        spans = list(zip(Timer.HOOKS, Timer.HOOKS[1:])) + [("end", "start")]
        phases = [statistics.median(1000 * ((t1 if b == "start" else t0)[b] - t0[e])
                                    for t0, t1 in zip(ticks, ticks[1:])) for e, b in spans]
        print(f"step_ms={step_ms:.2f} backend={a.backend} model={a.model} steps={len(ticks) - 1} "
              f"phases={','.join(f'{x:.2f}' for x in phases)}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--data-dir")
    ap.add_argument("--out")
    # one job (started by main, and again by Lightning for rank 1)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)

    from compare import machine, reporter, save, torch_of  # bench/torch/compare.py
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KOLO_", "SLURM_")) and k not in ("MASTER_ADDR", "MASTER_PORT", "RANK",
                                                                   "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.abspath(os.path.join(a.build, "python")) + os.pathsep + env.get("PYTHONPATH", ""))

    def job(backend, model):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--backend", backend, "--model", model,
               "--steps", str(a.steps), "--warmup", str(a.warmup)] + (["--data-dir", a.data_dir] if a.data_dir else [])
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        m = re.search(r"^step_ms=([\d.]+) .* phases=([\d.,]+)", p.stdout, re.M)
        if p.returncode != 0 or not m:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-6000:]}")
        return float(m.group(1)), [float(x) for x in m.group(2).split(",")]

    say, lines = reporter()
    import pytorch_lightning
    say("# PyTorch Lightning DDP on backend kolo (strategy \"ddp_kolo\") vs gloo; Fashion-MNIST training step")
    say(f"# machine: {machine()}")
    say(f"# {torch_of(sys.executable)}, pytorch-lightning {pytorch_lightning.__version__}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    say(f"# 2 ranks (Lightning's launcher), batch {BATCH}/rank, 1 thread/rank; {a.reps} alternating "
        f"repetitions of {a.steps} timed steps after {a.warmup}; medians of each run's median step")
    tunables = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("MALLOC_"))
    say(f"# glibc malloc tunables (both alike): {tunables or 'none (glibc defaults)'}")
    say()
    say(f"{'model':5} {'gloo ms':>8} {'kolo ms':>8} {'gloo/kolo':>10}   runs ms (gloo | kolo)")
    parts = {}
    for model in a.models.split(","):
        g, k = [], []
        for rep in range(a.reps):
            # Alternate which backend goes first: neither always meets a warmer or a busier machine.
            for backend in (("gloo", "kolo") if rep % 2 == 0 else ("kolo", "gloo")):
                step, phases = job(backend, model)
                (g if backend == "gloo" else k).append(step)
                parts.setdefault((model, backend), []).append(phases)
        mg, mk = statistics.median(g), statistics.median(k)
        say(f"{model:5} {mg:8.1f} {mk:8.1f} {mg / mk:9.2f}x   {g} | {k}")
    say()
    say("# where a step's time goes, ms on rank 0 (medians over the runs of each run's median), hook to hook:")
    say("#   fwd = batch start to before backward (training_step, zero_grad); bwd = backward, DDP's")
    say("#   allreduces included; mid = after backward to before the optimizer's step; opt = the step")
    say("#   and Lightning's after-step work to the batch's end; loop = to the next batch's start (data)")
    say(f"{'model':5} {'backend':7} {'fwd':>7} {'bwd':>7} {'mid':>7} {'opt':>7} {'loop':>7}")
    for (model, backend), runs in parts.items():
        med = [statistics.median(r[i] for r in runs) for i in range(5)]
        say(f"{model:5} {backend:7} " + " ".join(f"{x:7.1f}" for x in med))
    say(f"# step time in ms (lower is better); gloo/kolo > 1: kolo faster; load average at end: "
        f"{os.getloadavg()[0]:.2f}")
    save(lines, a.out)


if __name__ == "__main__":
    sys.exit(main())
