#!/usr/bin/env python3
"""kolo::data's preprocessing cache on Fashion-MNIST, in one run.

1. Preprocessing throughput: fashion_mnist_preprocess (shift + elastic
   jitter of every training image, --copies C) rebuilt (--force) with 1 and
   2 ranks, alternating; samples/s as the program reports it (the build
   alone) and the process's wall time (with reading the IDX files); the
   1- and 2-rank caches are compared byte for byte.
2. Training from the cache vs from the IDX files: fashion_mnist
   --bench-steps on RANKS ranks with and without --cache (same model,
   batch 32/rank, 1 thread/rank): step time, and the wall time of the whole
   process (start-up = gunzip + convert the IDX files, or map + CRC-check
   the cache).

  bench/torch/cache.py [--build build] [--ranks 2] [--reps 3] [--copies 1] [--steps 40]
                       [--model cnn] [--limit N] [--dir /tmp] [--out FILE]

--limit N preprocesses only the first N images (smoke runs). The cache files
go to --dir and are removed at the end.
"""
import argparse, filecmp, os, re, statistics, subprocess, sys, tempfile, time

from compare import finish, machine, reporter, trainer  # bench/torch/compare.py, beside this script


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--out")
    a = ap.parse_args()
    kolorun, train, env = trainer(a.build)
    pre = os.path.join(a.build, "examples/fashion_mnist/fashion_mnist_preprocess")
    say, lines = reporter()

    def launch(n, prog, *args):
        cmd = [kolorun, "-np", str(n), prog, *args] if n > 1 else [prog, *args]
        t0 = time.monotonic()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.monotonic() - t0
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
        return p.stdout, wall

    work = tempfile.mkdtemp(prefix="kolo_cache_bench.", dir=a.dir)
    caches = {n: os.path.join(work, f"np{n}.kcache") for n in (1, 2)}
    limit = ["--limit", str(a.limit)] if a.limit else []
    try:
        say(f"# kolo::data preprocessing cache, Fashion-MNIST (shift + elastic jitter, {a.copies} cop"
            f"{'y' if a.copies == 1 else 'ies'} per image{f', first {a.limit} images' if a.limit else ''})")
        say(f"# machine: {machine()}")
        say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
        say(f"# {a.reps} alternating repetitions; medians")

        rate = {1: [], 2: []}
        wall = {1: [], 2: []}
        for _ in range(a.reps):
            for n in (1, 2):
                out, w = launch(n, pre, "--out", caches[n], "--copies", str(a.copies), "--force", *limit)
                m = re.search(r"in ([\d.]+) s \((\d+) samples/s\)", out)
                if not m:
                    sys.exit(f"no throughput in the output:\n{out}")
                rate[n].append(int(m.group(2)))
                wall[n].append(round(w, 2))
        same = filecmp.cmp(caches[1], caches[2], shallow=False)
        r1, r2 = statistics.median(rate[1]), statistics.median(rate[2])
        say()
        say(f"{'ranks':5} {'samples/s':>10} {'wall s':>8}   runs samples/s | wall s")
        for n, r in ((1, r1), (2, r2)):
            say(f"{n:5} {r:10.0f} {statistics.median(wall[n]):8.2f}   {rate[n]} | {wall[n]}")
        say(f"# 2 ranks / 1 rank: {r2 / r1:.2f}x; cache {os.path.getsize(caches[1]) / 1e6:.1f} MB; "
            f"1-rank and 2-rank caches byte-identical: {'yes' if same else 'NO'}")

        # 2. Training from the cache vs from the IDX files.
        common = ["--model", a.model, "--batch", "32", "--threads", "1", "--bench-steps", str(a.steps)]
        if a.limit:
            common += ["--train-limit", str(a.limit * a.copies)]
        step = {"idx": [], "cache": []}
        total = {"idx": [], "cache": []}
        for _ in range(a.reps):
            for src, extra in (("idx", []), ("cache", ["--cache", caches[1]])):
                out, w = launch(a.ranks, train, *common, *extra)
                m = re.search(r"step_ms=([\d.]+)", out)
                if not m:
                    sys.exit(f"no step time in the output:\n{out}")
                step[src].append(float(m.group(1)))
                total[src].append(round(w, 2))
        say()
        say(f"training {a.model}, {a.ranks} ranks, {a.steps} steps after 5 warm-up: step time and process wall time")
        say(f"{'source':6} {'step ms':>8} {'wall s':>8}   runs step ms | wall s")
        for src in ("idx", "cache"):
            say(f"{src:6} {statistics.median(step[src]):8.2f} {statistics.median(total[src]):8.2f}   "
                f"{step[src]} | {total[src]}")
        say(f"# cache/idx: step {statistics.median(step['cache']) / statistics.median(step['idx']):.2f}x, "
            f"wall {statistics.median(total['cache']) / statistics.median(total['idx']):.2f}x "
            f"(the cache's samples are augmented; the IDX run trains on the plain images)")
        finish(say, lines, a.out)
    finally:
        for p in caches.values():
            if os.path.exists(p):
                os.remove(p)
        os.rmdir(work)


if __name__ == "__main__":
    main()
