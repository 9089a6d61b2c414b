#!/usr/bin/env python3
"""The training recipe's costs, kolo_torch on the Fashion-MNIST step, in one run.

1. Mixed precision: step time with --amp bf16 (LibTorch's CPU autocast) and
   --amp fp16 (f16 rounding emulated in f32, with GradScaler) against f32,
   for cnn, mlp and convbn.
2. SyncBatchNorm: convbn's step time with SyncBatchNorm (--batchnorm sync:
   2 extra small allreduces per BatchNorm layer and step, one in forward, one
   in backward) against plain per-rank BatchNorm (local) and BatchNorm with
   rank 0's buffers broadcast every step (broadcast).

Each configuration runs REPS times, alternating, with fashion_mnist
--bench-steps; medians of step_ms and same-run ratios are printed. Per-rank
batch 32, one thread per rank, OPENBLAS_NUM_THREADS=1.

  bench/torch/recipe.py [--build build] [--ranks 2] [--reps 3] [--steps 40] [--out FILE]
"""
import argparse, os, re, statistics, subprocess, sys, time

from compare import finish, machine, reporter, trainer  # bench/torch/compare.py, beside this script


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--models", default="cnn,mlp,convbn")
    ap.add_argument("--out")
    a = ap.parse_args()
    kolorun, prog, env = trainer(a.build)
    say, lines = reporter()

    def step_ms(*args):
        cmd = ([kolorun, "-np", str(a.ranks), prog] if a.ranks > 1 else [prog]) + [
            "--batch", "32", "--threads", "1", "--bench-steps", str(a.steps), *args]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        m = re.search(r"step_ms=([\d.]+)", p.stdout)
        if p.returncode != 0 or not m:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
        return float(m.group(1))

    say(f"# kolo_torch training recipe: step time, Fashion-MNIST, {a.ranks} ranks, batch 32/rank, 1 thread/rank")
    say(f"# machine: {machine()}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    say(f"# {a.reps} alternating repetitions of {a.steps} timed steps each; medians")

    configs = []  # (label, args)
    models = a.models.split(",")
    for model in models:
        for amp in ("none", "bf16", "fp16"):
            configs.append(((model, "amp", amp), ["--model", model, "--amp", amp]))
    if "convbn" in models:
        for bn in ("local", "broadcast"):  # "sync" is convbn's amp=none run above
            configs.append((("convbn", "bn", bn), ["--model", "convbn", "--batchnorm", bn]))
    runs = {label: [] for label, _ in configs}
    for _ in range(a.reps):
        for label, args in configs:
            runs[label].append(step_ms(*args))
    med = {label: statistics.median(v) for label, v in runs.items()}

    say()
    say(f"{'model':7} {'f32 ms':>8} {'bf16 ms':>8} {'bf16/f32':>9} {'fp16* ms':>9} {'fp16*/f32':>10}   runs f32 | bf16 | fp16*")
    for model in models:
        f, b, h = (med[(model, "amp", x)] for x in ("none", "bf16", "fp16"))
        say(f"{model:7} {f:8.2f} {b:8.2f} {b / f:8.2f}x {h:9.2f} {h / f:9.2f}x   "
            f"{runs[(model, 'amp', 'none')]} | {runs[(model, 'amp', 'bf16')]} | {runs[(model, 'amp', 'fp16')]}")
    say("# fp16*: LibTorch 1.13 has no f16 kernels on the CPU; f16 is emulated (rounding between layers) with loss scaling")
    if "convbn" in models:
        s, l, br = med[("convbn", "amp", "none")], med[("convbn", "bn", "local")], med[("convbn", "bn", "broadcast")]
        say()
        say(f"{'convbn':7} {'SyncBN ms':>10} {'BN ms':>8} {'SyncBN/BN':>10} {'BN+bcast ms':>12}   runs SyncBN | BN | BN+bcast")
        say(f"{'':7} {s:10.2f} {l:8.2f} {s / l:9.2f}x {br:12.2f}   "
            f"{runs[('convbn', 'amp', 'none')]} | {runs[('convbn', 'bn', 'local')]} | {runs[('convbn', 'bn', 'broadcast')]}")
    finish(say, lines, a.out)


if __name__ == "__main__":
    main()
