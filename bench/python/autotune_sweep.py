#!/usr/bin/env python3
"""KOLO_AUTOTUNE against a sweep of fixed bucket caps (issue 32): the MLP and
CNN steps of bench/python/horovod_step.py (kolo.torch's DistributedOptimizer,
Debian's torch), 2 ranks, samples/s of the steps after the tuning.

Configurations: the default (KOLO_FUSION_THRESHOLD unset: 25 MiB), each cap of
autotune's grid fixed (256 KiB, 1, 4, 16, 64 MiB), and KOLO_AUTOTUNE=1 (which
tries those caps during its first ~40 steps). Every configuration times the
same steps: WARMUP untimed steps (past the tuning) then STEPS timed ones.
Interleaved: each repetition runs every configuration once per model, the
order rotating; medians over the repetitions; ratios of same-run medians.
Caps that cut the model's gradients alike run the same program: the report
also pools the fixed runs by the layout they ran with (the bucket sizes that
horovod_step.py prints), which is what autotune chooses between.
Writes a Markdown report (--out) with each autotune run's choice from its log.

  bench/python/autotune_sweep.py [--build build] [--reps 5] [--out FILE]
"""
import argparse
import csv
import datetime
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
CAPS = [256 << 10, MiB, 4 * MiB, 16 * MiB, 64 * MiB]
CONFIGS = ["default"] + [f"fixed {c}" for c in CAPS] + ["autotune"]


def label(config):
    if not config.startswith("fixed "):
        return config
    c = int(config.split()[1])
    return f"{c // MiB} MiB" if c >= MiB else f"{c >> 10} KiB"


def run(a, model, config, log_path):
    env = dict(os.environ, MODEL=model, WARMUP=str(a.warmup), STEPS=str(a.steps), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", PYTHONPATH=os.path.abspath(os.path.join(a.build, "python")))
    for k in ("KOLO_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", "KOLO_AUTOTUNE", "HOROVOD_AUTOTUNE"):
        env.pop(k, None)
    if config.startswith("fixed "):
        env["KOLO_FUSION_THRESHOLD"] = config.split()[1]
    if config == "autotune":
        env.update(KOLO_AUTOTUNE="1", KOLO_AUTOTUNE_LOG=log_path)
    kolorun = os.path.join(a.build, "tools", "kolorun", "kolorun")
    p = subprocess.run([kolorun, "-np", "2", "--no-tag-output", a.python, os.path.join(HERE, "horovod_step.py")],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    m = re.search(r"samples_per_s=(\d+) .*layout=(\S+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.exit(f"{model} {config} failed ({p.returncode}):\n{p.stdout[-3000:]}")
    return float(m.group(1)), m.group(2)


def chosen(log_path):
    """(chosen cap, candidates tried) from an autotune CSV log."""
    with open(log_path) as f:
        rows = list(csv.DictReader(f))
    pick = [r for r in rows if r["kind"] == "chosen"]
    tried = [int(r["bucket_bytes"]) for r in rows if r["kind"] == "sample"]
    return (int(pick[0]["bucket_bytes"]) if pick else None), tried


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--out")
    a = ap.parse_args()
    models = a.models.split(",")
    results = {(m, c): [] for m in models for c in CONFIGS}
    layouts = {(m, c): set() for m in models for c in CONFIGS}
    choices = {m: [] for m in models}
    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for model in models:
                k = rep % len(CONFIGS)
                for config in CONFIGS[k:] + CONFIGS[:k]:
                    log_path = os.path.join(tmp, f"{model}-{rep}.csv")
                    sps, layout = run(a, model, config, log_path)
                    results[(model, config)].append(sps)
                    layouts[(model, config)].add(layout)
                    if config == "autotune":
                        choices[model].append(chosen(log_path))
                    print(f"rep {rep} {model} {label(config)}: {sps:.0f} samples/s", flush=True)
    lines = [f"# KOLO_AUTOTUNE against fixed bucket caps: kolo.torch, 2 ranks",
             "",
             f"`bench/python/autotune_sweep.py --reps {a.reps} --warmup {a.warmup} --steps {a.steps}` "
             f"(bench/python/horovod_step.py, Debian's torch, shared memory, 1 thread per rank). "
             f"Machine: {socket.gethostname()} (dev VM, 2 cores), {started:%Y-%m-%d %H:%M} UTC, load average "
             f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. Samples/s of {a.steps} steps after "
             f"{a.warmup} untimed ones (autotune's trials end before), medians of {a.reps} interleaved repetitions.",
             ""]
    for model in models:
        med = {c: statistics.median(results[(model, c)]) for c in CONFIGS}
        fixed = [c for c in CONFIGS if c != "autotune"]
        best = max(fixed, key=lambda c: med[c])
        lines += [f"## {model.upper()}", "", "| configuration | samples/s (median) | runs | vs default | vs best fixed |",
                  "|---|---|---|---|---|"]
        for c in CONFIGS:
            runs = ", ".join(f"{x:.0f}" for x in results[(model, c)])
            lines.append(f"| {label(c)} | {med[c]:.0f} | {runs} | {med[c] / med['default']:.3f} | "
                         f"{med[c] / med[best]:.3f} |")
        picks = ", ".join(label(f"fixed {p}") if p else "none" for p, _ in choices[model])
        tried = sorted({t for _, ts in choices[model] for t in ts})
        # The fixed runs pooled by layout (every fixed configuration runs one layout).
        pools = {}
        for c in fixed:
            pools.setdefault(min(layouts[(model, c)]), []).append(c)
        pooled = {lay: statistics.median([x for c in cs for x in results[(model, c)]]) for lay, cs in pools.items()}
        best_lay = max(pooled, key=pooled.get)
        default_lay = min(layouts[(model, "default")])
        lines += ["", "| layout (elements per bucket) | configurations | samples/s (median of their runs) |",
                  "|---|---|---|"]
        for lay, cs in pools.items():
            lines.append(f"| {lay} | {', '.join(label(c) for c in cs)} | {pooled[lay]:.0f} |")
        ran = ", ".join(sorted(layouts[(model, "autotune")]))
        lines += ["", f"Autotune's runs ran with layout {ran}. By layout: autotuned / best layout "
                  f"**{med['autotune'] / pooled[best_lay]:.3f}**, autotuned / the default's layout "
                  f"**{med['autotune'] / pooled[default_lay]:.3f}**."]
        lines += ["", f"Best fixed: {label(best)}. Autotune tried {', '.join(label(f'fixed {t}') for t in tried)}; "
                  f"chose, run by run: {picks}. Autotuned / best fixed: "
                  f"**{med['autotune'] / med[best]:.3f}**; autotuned / default: "
                  f"**{med['autotune'] / med['default']:.3f}**.", ""]
    report = "\n".join(lines)
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
