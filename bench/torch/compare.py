#!/usr/bin/env python3
"""kolo_torch vs PyTorch DDP (Gloo) on the Fashion-MNIST training step, in one run.

For each model (cnn, mlp) and rank count (1, 2) it alternates kolo's
fashion_mnist --bench-steps and the DDP anchor (../shared/anchors), REPS
times each, and prints medians, kolo/DDP ratios and scaling efficiency
(samples/s at 2 ranks / 2 x samples/s at 1 rank); the machine's ceiling for
that scaling (two independent 1-rank processes at once: no communication,
only the cores, caches and memory bandwidth they share); then kolo's time per
step with and without overlap at 2 ranks. Per-rank batch 32, one thread per rank,
OPENBLAS_NUM_THREADS=1.

  bench/torch/compare.py [--build build-torch] [--reps 3] [--steps 40] [--out FILE]
"""
import argparse, os, platform, re, statistics, subprocess, sys, time

# The anchors live beside the repository (../shared/anchors), so the script
# runs from any clone; --anchors or $KOLO_ANCHORS point elsewhere.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANCHORS = os.environ.get("KOLO_ANCHORS", os.path.join(os.path.dirname(REPO), "shared", "anchors"))


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, Linux {platform.release()}"


def torch_of(python):
    """"torch 2.15.0 (Python 3.11.2, /path/to/python)": which torch a --python runs."""
    out = subprocess.run([python, "-c", "import platform, torch; print(torch.__version__, platform.python_version())"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit(f"{python} cannot import torch:\n{out.stdout}")
    version, py = out.stdout.split()[-2:]
    return f"torch {version} (Python {py}, {python})"


def reporter():
    """(say, lines): say(s) prints s at once and keeps it in lines, for --out."""
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)
    return say, lines


def save(lines, out):
    """All lines into `out` (if given)."""
    if out:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")


def finish(say, lines, out):
    """The closing line, then all lines into `out` (if given)."""
    say(f"# load average at end: {os.getloadavg()[0]:.2f}")
    save(lines, out)


def trainer(build):
    """(kolorun, fashion_mnist, env) of a build; env: one BLAS/OpenMP thread per rank."""
    return (os.path.join(build, "tools/kolorun/kolorun"), os.path.join(build, "examples/fashion_mnist/fashion_mnist"),
            dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"))


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"samples_per_s=(\d+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
    step = re.search(r"step_ms=([\d.]+)", p.stdout)
    return float(m.group(1)), (float(step.group(1)) if step else None)


def run_pair(cmd, env):
    """The machine's ceiling for 2 ranks: two independent single-process runs
    of cmd at once (no communication, only the cores, caches and memory
    bandwidth they share); their samples/s added."""
    ps = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
          for _ in range(2)]
    total = 0.0
    for p in ps:
        out = p.communicate()[0]
        m = re.search(r"samples_per_s=(\d+)", out)
        if p.returncode != 0 or not m:
            sys.exit(f"failed: {' '.join(cmd)}\n{out}")
        total += float(m.group(1))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-torch")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--models", default="cnn,mlp")
    ap.add_argument("--out")
    ap.add_argument("--anchors", default=ANCHORS, help="directory of the DDP anchor (default: %(default)s)")
    a = ap.parse_args()
    anchors = a.anchors
    if not os.path.isfile(os.path.join(anchors, "ddp_fashion_mnist.py")):
        sys.exit(f"compare.py: no DDP anchor at {anchors}/ddp_fashion_mnist.py (pass --anchors DIR)")
    kolorun = os.path.join(a.build, "tools/kolorun/kolorun")
    prog = os.path.join(a.build, "examples/fashion_mnist/fashion_mnist")
    # fashion_mnist raises glibc's mmap threshold itself (mallopt); the same
    # setting reaches the Python anchor through glibc's environment tunables.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MALLOC_MMAP_THRESHOLD_="1073741824", MALLOC_TRIM_THRESHOLD_="1073741824")
    say, lines = reporter()

    say(f"# kolo_torch vs PyTorch DDP (Gloo), Fashion-MNIST step, batch 32/rank, 1 thread/rank")
    say(f"# machine: {machine()}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    say(f"# {a.reps} alternating repetitions of {a.steps} timed steps each; medians")

    def kolo(model, n, *extra):
        cmd = [kolorun, "-np", str(n), prog] if n > 1 else [prog]
        return run(cmd + ["--model", model, "--batch", "32", "--threads", "1",
                          "--bench-steps", str(a.steps), *extra], env)

    def ddp(model, n):
        e = dict(env, MODEL=model, BATCH="32", THREADS="1", STEPS=str(a.steps))
        return run([f"{anchors}/launch_torch.sh", str(n), "/usr/bin/python3",
                    f"{anchors}/ddp_fashion_mnist.py"], e)

    def pair(model):
        return run_pair([prog, "--model", model, "--batch", "32", "--threads", "1", "--bench-steps", str(a.steps)],
                        env)

    results = {}
    overlap = {}
    ceiling = {}
    for model in a.models.split(","):
        for n in (1, 2):
            k, d = [], []
            for _ in range(a.reps):
                k.append(kolo(model, n)[0])
                d.append(ddp(model, n)[0])
            results[(model, n)] = (statistics.median(k), statistics.median(d), k, d)
        ceiling[model] = statistics.median([pair(model) for _ in range(a.reps)])
        on, off = [], []
        for _ in range(a.reps):
            on.append(kolo(model, 2)[1])
            off.append(kolo(model, 2, "--no-overlap")[1])
        overlap[model] = (statistics.median(on), statistics.median(off),
                          statistics.median([x / y for x, y in zip(on, off)]))

    say()
    say(f"{'model':5} {'ranks':>5} {'kolo samples/s':>15} {'DDP samples/s':>14} {'kolo/DDP':>9}   runs (kolo | DDP)")
    for (model, n), (k, d, ks, ds) in results.items():
        say(f"{model:5} {n:5d} {k:15.0f} {d:14.0f} {k / d:8.2f}x   {ks} | {ds}")
    say()
    say(f"{'model':5} {'kolo scaling 1->2':>18} {'DDP scaling 1->2':>17} {'ceiling (2 independent runs)':>29}")
    for model in a.models.split(","):
        k1, d1 = results[(model, 1)][:2]
        k2, d2 = results[(model, 2)][:2]
        say(f"{model:5} {k2 / (2 * k1):17.0%} {d2 / (2 * d1):17.0%} {ceiling[model] / (2 * k1):23.0%} "
            f"({ceiling[model]:.0f}/s)")
    say(f"{'model':5} {'kolo best-of':>13} {'DDP best-of':>12} {'ratio':>6}   (2 ranks; interference only lowers a run)")
    for model in a.models.split(","):
        ks, ds = results[(model, 2)][2:]
        say(f"{model:5} {max(ks):13.0f} {max(ds):12.0f} {max(ks) / max(ds):5.2f}x")
    say()
    say(f"{'model':5} {'step ms, overlap':>17} {'step ms, no overlap':>20} {'on/off, median of pairs':>24}   "
        "(kolo, 2 ranks)")
    for model, (on, off, ratio) in overlap.items():
        say(f"{model:5} {on:17.1f} {off:20.1f} {ratio:24.3f}")
    say(f"{'model':5} {'kolo scaling / ceiling':>23}   (goal >= 90 %)")
    for model in a.models.split(","):
        say(f"{model:5} {results[(model, 2)][0] / ceiling[model]:22.0%}")
    finish(say, lines, a.out)


if __name__ == "__main__":
    main()
