#!/usr/bin/env python3
"""What the overlap default costs or buys: fashion_mnist's training step at N
ranks with --overlap auto (the default), on and off, interleaved.

Each repetition runs the three modes back to back, in an order rotated per
repetition; the ratios are taken within a repetition (adjacent runs see the
same machine) and their medians reported, with the mode auto kept in each
run. Goal (issue 18): auto never slower than off by more than noise, 3 % in
the median of the pairs. Batch 32/rank, 1 thread/rank, OPENBLAS_NUM_THREADS=1.

  bench/torch/overlap.py [--build build] [--ranks 2] [--reps 7] [--steps 40] [--models mlp,cnn] [--out FILE]
"""
import argparse, os, re, statistics, subprocess, sys, time

from compare import finish, machine, reporter, trainer  # bench/torch/compare.py, beside this script

MODES = ("auto", "on", "off")


def step(cmd, env):
    """(step_ms, overlap field) of one fashion_mnist --bench-steps run."""
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"overlap=(\S+) .*step_ms=([\d.]+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
    return float(m.group(2)), m.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--out")
    a = ap.parse_args()
    kolorun, prog, env = trainer(a.build)
    say, lines = reporter()
    say(f"# fashion_mnist step at {a.ranks} ranks: --overlap auto (default) vs on vs off, interleaved")
    say(f"# machine: {machine()}")
    say(f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average at start: {os.getloadavg()[0]:.2f}")
    say(f"# {a.reps} repetitions of the 3 modes (order rotated), {a.steps} timed steps each "
        f"(after 5 warm-up; auto's trial is steps 1-12); batch 32/rank, 1 thread/rank")
    say()
    say(f"{'model':5} {'auto ms':>8} {'on ms':>8} {'off ms':>8} {'auto/off':>9} {'on/off':>7} "
        f"{'worst auto/off':>15}   auto kept")
    for model in a.models.split(","):
        ms = {m: [] for m in MODES}
        kept = []
        for r in range(a.reps):
            for mode in MODES[r % 3:] + MODES[:r % 3]:
                t, field = step([kolorun, "-np", str(a.ranks), prog, "--model", model, "--batch", "32",
                                 "--threads", "1", "--bench-steps", str(a.steps), "--overlap", mode], env)
                ms[mode].append(t)
                if mode == "auto":
                    kept.append(field.split(":")[-1])
        auto_off = [x / y for x, y in zip(ms["auto"], ms["off"])]
        on_off = [x / y for x, y in zip(ms["on"], ms["off"])]
        say(f"{model:5} {statistics.median(ms['auto']):8.1f} {statistics.median(ms['on']):8.1f} "
            f"{statistics.median(ms['off']):8.1f} {statistics.median(auto_off):9.3f} "
            f"{statistics.median(on_off):7.3f} {max(auto_off):15.3f}   {','.join(kept)}")
        for mode in MODES:
            say(f"#   {model} {mode:4} step ms: {', '.join(f'{t:.1f}' for t in ms[mode])}")
    finish(say, lines, a.out)


if __name__ == "__main__":
    main()
