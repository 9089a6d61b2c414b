#!/usr/bin/python3
"""Draws the benchmark page's charts (docs/benchmarks.md) from the committed results in bench/results/.

  /usr/bin/python3 bench/charts.py [--results bench/results] [--out docs/charts]

Writes, each chart naming the machine and date of the files it reads:
  allreduce-one-host.png   busbw vs size, kolo / Open MPI / Gloo, 2 ranks on one host,
                           with the memory-bandwidth ceiling    (allreduce-np2-*.md)
  allreduce-2hosts.png     the same across 2 emulated hosts x 2 ranks, shaped and unshaped
                           link, against the link bound          (allreduce-2hosts-*.md)
  training.png             samples/s at 2 ranks: kolo against DDP on Gloo and kolo's Horovod
                           API, with the machine's ceiling where measured (torch-ddp-*,
                           python-ddp-*, lightning-ddp-*, python-fsdp-*)
  scaling-np2-np8.png      2 against 8 ranks on the lent 16-core host: training samples/s
                           and allreduce (overlap-auto-np8-np2-*, timeline-cost-np{2,8}-*)

Of each kind the newest file (by the date in its name) is drawn; the numbers stay in
the files. The parsers read the tables the bench scripts write and stop with the file's
name where a table is not as expected. Needs Debian's python3-matplotlib.
"""
import argparse
import glob
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

DPI = 100
# Okabe-Ito: one colour per system across every chart.
COLOUR = {"kolo": "#0072B2", "kolo flat": "#56B4E9", "Open MPI": "#E69F00", "Gloo": "#999999",
          "Horovod API": "#009E73", "ceiling": "#000000"}


class Source:
    """One results file: its text, machine and date."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        with open(path) as f:
            self.text = f.read()
        # The scripts' "# machine:" / "- machine:" line; else a prose "Machine: ..." up to ";" or "(".
        m = (re.search(r"(?im)^\s*[#\-]\s*machine:\s*(.+)$", self.text)
             or re.search(r"(?im)^machine:\s*([^;(]+)", self.text))
        machine = m.group(1) if m else "unknown machine"
        machine = re.sub(r"^vm:\s*", "", machine)
        machine = re.sub(r",\s*(Linux|\d[\d.]* GiB).*$", "", machine)
        self.machine = machine.strip().rstrip(".")
        m = re.search(r"\d{4}-\d{2}-\d{2}", self.name) or re.search(r"\d{4}-\d{2}-\d{2}", self.text)
        self.date = m.group(0) if m else "undated"

    def fail(self, what):
        sys.exit(f"charts: {self.path}: {what}")

    def label(self):
        return f"{self.machine}, {self.date} ({self.name})"


def newest(results, pattern):
    """The file matching pattern with the latest date in its name (ties: the later name)."""
    paths = glob.glob(os.path.join(results, pattern))
    if not paths:
        sys.exit(f"charts: no {pattern} in {results}")

    def key(p):
        m = re.search(r"\d{4}-\d{2}-\d{2}", os.path.basename(p))
        return (m.group(0) if m else "", os.path.basename(p))
    return Source(max(paths, key=key))


def pipe_table(src, after=""):
    """The first markdown pipe table after the line containing `after`: [{header: cell}]."""
    start = src.text.find(after)
    if start < 0:
        src.fail(f"no '{after}'")
    lines = src.text[start:].splitlines()
    i = next((k for k, l in enumerate(lines) if l.startswith("|")), None)
    if i is None or i + 1 >= len(lines) or not re.match(r"^\|[\s:\-|]+$", lines[i + 1]):
        src.fail(f"no table after '{after}'")
    cells = lambda l: [c.strip() for c in l.strip().strip("|").split("|")]  # noqa: E731
    head = cells(lines[i])
    rows = []
    for l in lines[i + 2:]:
        if not l.startswith("|"):
            break
        rows.append(dict(zip(head, cells(l))))
    return rows


def text_table(src, header, start=0):
    """The rows under the line starting with `header` (the bench scripts' aligned text
    tables), up to a blank or '#' line: each the cells before the per-run lists."""
    i = src.text.find("\n" + header, start)
    if i < 0:
        src.fail(f"no table headed '{header}'")
    rows = []
    for l in src.text[i + 1:].splitlines()[1:]:
        if not l.strip() or l.startswith("#"):
            break
        rows.append(l.split("[")[0].split())
    return rows


def num(s):
    """A cell as a number: '1.0', '0.359 GB/s', '283.6 µs', '1.19x', '**0.985**'."""
    m = re.search(r"-?\d+(\.\d+)?", s.replace(",", ""))
    return float(m.group(0)) if m else float("nan")


def size_bytes(s):
    """'8 B', '64 KiB', '1 MiB', '268435456' -> bytes."""
    m = re.match(r"\s*([\d.]+)\s*([KMG]i)?B?\s*$", s)
    if not m:
        raise ValueError(s)
    return float(m.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[m.group(2)]


def size_axis(ax, sizes):
    """Log-2 size axis with ticks at the sizes the benchmark page's tables quote."""
    ax.set_xscale("log", base=2)
    quoted = [8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]
    ax.set_xticks([q for q in quoted if min(sizes) <= q <= max(sizes)])
    ax.xaxis.set_major_formatter(FuncFormatter(
        lambda v, _: next((f"{v / u:g} {n}" for u, n in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
                           if v >= u), f"{v:g} B")))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("message size")


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"charts: {path} ({os.path.getsize(path) // 1024} KiB)")


# ---- allreduce -----------------------------------------------------------------------------

def one_host(results, out):
    src = newest(results, "allreduce-np2-*.md")
    rows = pipe_table(src, "## Medians")
    n = 2
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=DPI)
    for col, name in (("kolo", "kolo"), ("mpi", "Open MPI"), ("gloo", "Gloo")):
        # busbw from the median time (the table's busbw is rounded to 1 MB/s).
        pts = [(size_bytes(r["bytes"]), size_bytes(r["bytes"]) / num(r[f"{col} time_us"]) / 1e3 * 2 * (n - 1) / n)
               for r in rows]
        ax.plot(*zip(*pts), marker="o", markersize=3.5, color=COLOUR[name], label=name)
    sizes = [size_bytes(r["bytes"]) for r in rows]
    m = re.search(r"memcpy ([\d.]+) GB/s", src.text)
    if m:
        ax.axhline(float(m.group(1)), color=COLOUR["ceiling"], linestyle="--", linewidth=1,
                   label=f"ceiling: one core's memcpy ({m.group(1)} GB/s)")
    size_axis(ax, sizes)
    ax.set_yscale("log")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"allreduce f32 sum in place, {n} ranks on one host, median of 3 rounds\n{src.label()}",
                 fontsize=9)
    ax.grid(True, which="major", color="#DDDDDD", linewidth=0.5)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save(fig, out, "allreduce-one-host.png")


def two_hosts(results, out):
    src = newest(results, "allreduce-2hosts-*.md")
    n = int(num(re.search(r"f32 sum in place, (\d+) ranks", src.text).group(1)))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=DPI, sharey=True)
    for ax, link in zip(axes, ("shaped", "unshaped")):
        m = re.search(rf"### {link} link[^\n]*?:\s*(.*?); link bound ([\d.]+) GB/s algbw", src.text)
        if not m:
            src.fail(f"no '{link} link' section with its link bound")
        rows = pipe_table(src, f"### {link} link")
        plotted = []
        for col, name in (("kolo hier busbw", "kolo"), ("kolo flat busbw", "kolo flat"),
                          ("Open MPI busbw", "Open MPI"), ("Gloo busbw", "Gloo")):
            # 8 B rounds to 0.000 GB/s: left out of a log axis (its latency is in the table).
            pts = [(size_bytes(r["size"]), num(r[col])) for r in rows if num(r[col]) > 0]
            plotted += [x for x, _ in pts]
            label = {"kolo": "kolo (hierarchical)", "kolo flat": "kolo flat (KOLO_HIERARCHICAL=0)"}.get(name, name)
            ax.plot(*zip(*pts), marker="o", markersize=3.5, color=COLOUR[name], label=label)
        # The bound is one n per host link (algbw); busbw = algbw x 2(n-1)/n.
        bound = float(m.group(2)) * 2 * (n - 1) / n
        ax.axhline(bound, color=COLOUR["ceiling"], linestyle="--", linewidth=1,
                   label=f"link bound ({bound:.3f} GB/s busbw)")
        size_axis(ax, plotted)
        ax.set_yscale("log")
        ax.set_title(f"{link} link ({m.group(1).replace('iperf3 ', 'iperf3: ')})", fontsize=9)
        ax.grid(True, which="major", color="#DDDDDD", linewidth=0.5)
        ax.legend(fontsize=7.5, loc="lower right")
    axes[0].set_ylabel("bus bandwidth (GB/s)")
    fig.suptitle(f"allreduce f32 sum in place, 2 emulated hosts x {n // 2} ranks, median of 3 rounds\n"
                 f"{src.label()}", fontsize=9)
    fig.tight_layout()
    save(fig, out, "allreduce-2hosts.png")


# ---- training ------------------------------------------------------------------------------

def per_rank_batch(src):
    m = re.search(r"batch (\d+)/rank", src.text)
    if not m:
        src.fail("no 'batch N/rank'")
    return int(m.group(1))


def cpp_front(results):
    """kolo_torch (C++) against DDP on Gloo; ceiling: two independent 1-rank runs."""
    src = newest(results, "torch-ddp-np2-*.md")
    header = next((l for l in src.text.splitlines() if l.startswith("model ranks")), "")
    if not re.search(r"kolo samples/s\s+DDP samples/s", header):
        src.fail(f"unexpected header '{header}'")
    out = {}
    for model, ranks, kolo, ddp, *_ in text_table(src, "model ranks"):
        if ranks == "2":
            out[model] = {"Gloo": num(ddp), "kolo": num(kolo)}
    for model, *cells in text_table(src, "model  kolo scaling 1->2"):
        m = re.search(r"\((\d+)/s\)", " ".join(cells))
        if m and model in out:
            out[model]["ceiling"] = float(m.group(1))
    return src, "C++ front\n(kolo_torch)\nvs DDP", out


def python_ddp(src, title):
    """DDP on "kolo" and "gloo", the Horovod API; ceiling: two independent 1-rank runs."""
    header = next((l for l in src.text.splitlines() if l.startswith("model ranks")), "")
    if header.split()[:6] != ["model", "ranks", "gloo", "kolo", "hvd", "ceiling"]:
        src.fail(f"unexpected header '{header}'")
    out = {}
    for model, ranks, gloo, kolo, hvd, ceiling, *_ in text_table(src, "model ranks"):
        if ranks == "2":
            out[model] = {"Gloo": num(gloo), "kolo": num(kolo), "Horovod API": num(hvd)}
            if num(ceiling) == num(ceiling):  # not nan
                out[model]["ceiling"] = num(ceiling)
    return src, title, out


def step_ms(results, pattern, title):
    """Lightning / FSDP: step ms of the slower rank, as samples/s of the job."""
    src = newest(results, pattern)
    header = next((l for l in src.text.splitlines() if l.startswith("model  gloo ms")), "")
    if header.split()[:5] != ["model", "gloo", "ms", "kolo", "ms"]:
        src.fail(f"unexpected header '{header}'")
    m = re.search(r"(\d+) ranks", src.text)
    samples = int(m.group(1)) * per_rank_batch(src) * 1000.0
    out = {model: {"Gloo": samples / num(gloo), "kolo": samples / num(kolo)}
           for model, gloo, kolo, *_ in text_table(src, "model  gloo ms")}
    return src, title, out


def training(results, out):
    groups = [cpp_front(results),
              python_ddp(newest(results, "python-ddp-np2-malloc-*.md"), "Python DDP\n(torch 1.13,\nmalloc tuned)"),
              python_ddp(newest(results, "python-ddp-torch1.13-np2-*.md"), "Python DDP\n(torch 1.13)"),
              python_ddp(newest(results, "python-ddp-torch2.15-np2-*.md"), "Python DDP\n(torch 2.15)"),
              step_ms(results, "lightning-ddp-*-np2-*.md", "Lightning DDP\n(torch 2.15)"),
              step_ms(results, "python-fsdp-*-np2-*.md", "FSDP2\n(torch 2.15)")]
    machines = sorted({s.machine for s, _, _ in groups})
    systems = ["Gloo", "kolo", "Horovod API"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), dpi=DPI)
    width = 0.26
    for ax, model, long in zip(axes, ("cnn", "mlp"), ("CNN, 1.2 M parameters", "MLP 784-4096-4096-10, 20.3 M")):
        for g, (src, title, data) in enumerate(groups):
            d = data.get(model)
            if not d:
                src.fail(f"no 2-rank row for {model}")
            present = [s for s in systems if s in d]
            for k, s in enumerate(present):
                x = g + (k - (len(present) - 1) / 2) * width
                label = {"Gloo": "PyTorch Gloo (DDP / Lightning / FSDP2)", "kolo": "kolo",
                         "Horovod API": "kolo, Horovod API (kolo.torch)"}[s]
                ax.bar(x, d[s], width * 0.95, color=COLOUR[s], label=label if g == 0 or s == "Horovod API" else None)
                if s != "Gloo":  # the same-run ratio the benchmark page quotes
                    ax.annotate(f"{d[s] / d['Gloo']:.2f}×", (x, d[s]), ha="center", fontsize=6.5,
                                textcoords="offset points", xytext=(0, 2))
            if "ceiling" in d:
                half = len(present) * width / 2 + 0.04
                ax.hlines(d["ceiling"], g - half, g + half, colors=COLOUR["ceiling"], linewidth=2,
                          label="ceiling: two independent 1-rank runs")
        ax.set_xticks(range(len(groups)), [f"{t}\n{s.date}" for s, t, _ in groups], fontsize=7.5)
        ax.set_title(long, fontsize=9)
        ax.set_ylabel("samples/s (2 ranks, batch 32/rank)")
        ax.grid(axis="y", color="#DDDDDD", linewidth=0.5)
        ax.set_axisbelow(True)
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.legend(uniq.values(), uniq.keys(), fontsize=7.5, loc="upper right")
    fig.suptitle("Fashion-MNIST training step, 2 ranks, 1 thread/rank, medians of interleaved repetitions "
                 f"(bench/results: torch-ddp, python-ddp, lightning-ddp, python-fsdp)\n{'; '.join(machines)}",
                 fontsize=9)
    fig.tight_layout()
    save(fig, out, "training.png")


# ---- scaling -------------------------------------------------------------------------------

def overlap_runs(src):
    """{(ranks, model, mode): [step ms of every run]} from overlap.py's blocks."""
    runs = {}
    for block in re.split(r"(?m)^# fashion_mnist step at ", src.text)[1:]:
        ranks = int(re.match(r"(\d+) ranks", block).group(1))
        for model, mode, values in re.findall(r"(?m)^#\s+(\w+) (auto|on|off)\s+step ms: (.+)$", block):
            runs.setdefault((ranks, model, mode), []).extend(float(v) for v in values.split(","))
    if not runs:
        src.fail("no '# fashion_mnist step at N ranks' blocks with per-run step times")
    return runs


def cost_off(src):
    """The 'off' column of timeline_cost.sh's table: {measure: value}."""
    return {r["measure"]: num(r["off"]) for r in pipe_table(src, "| measure")}


def scaling(results, out):
    src = newest(results, "overlap-auto-np8-np2-*.md")
    runs = overlap_runs(src)
    batch = per_rank_batch(src)
    cost = {n: newest(results, f"timeline-cost-np{n}-gpuhost-*.md") for n in (2, 8)}
    offs = {n: cost_off(s) for n, s in cost.items()}
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.0), dpi=DPI, gridspec_kw={"width_ratios": [2, 1, 1]})
    ax = axes[0]
    styles = {"mlp": ("MLP", "#0072B2"), "cnn": ("CNN", "#D55E00")}
    for model, (name, colour) in styles.items():
        # Overlap::Auto, the optimizer's default; every run of both tables pooled.
        key = {n: (n, model, "auto") for n in (2, 8)}
        if not all(k in runs for k in key.values()):
            src.fail(f"no auto runs of {model} at 2 and 8 ranks")
        pts = [(n, n * batch * 1000 / statistics.median(runs[k])) for n, k in key.items()]
        ax.plot(*zip(*pts), marker="o", color=colour,
                label=f"{name} (median of {len(runs[key[2]])} and {len(runs[key[8]])} runs)")
        ax.plot([2, 8], [pts[0][1], pts[0][1] * 4], color=colour, linestyle="--", linewidth=0.8, alpha=0.6,
                label=f"{name}: linear from 2 ranks")
        ax.annotate(f"{pts[1][1] / (4 * pts[0][1]):.0%} of linear", pts[1], fontsize=7.5,
                    textcoords="offset points", xytext=(-75, 4))
    mlp = {n: n * batch * 1000 / offs[n]["MLP training step (ms)"] for n in (2, 8)}
    ax.plot(list(mlp), list(mlp.values()), marker="s", color="#56B4E9", linestyle="none",
            label=f"MLP, timeline-cost runs ({cost[2].date}, timeline off)")
    ax.set_xticks([2, 8])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("ranks (one core each)")
    ax.set_ylabel(f"samples/s, all ranks (batch {batch}/rank)")
    ax.set_title("fashion_mnist (C++ front) training, overlap auto", fontsize=9)
    ax.grid(color="#DDDDDD", linewidth=0.5)
    ax.legend(fontsize=7, loc="upper left")
    for ax, measure, unit in ((axes[1], "64 MiB allreduce busbw (GB/s)", "GB/s"),
                              (axes[2], "8 B allreduce latency (µs)", "µs")):
        vals = [offs[n][measure] for n in (2, 8)]
        ax.bar(["2 ranks", "8 ranks"], vals, color=COLOUR["kolo"], width=0.5)
        for x, v in enumerate(vals):
            ax.annotate(f"{v:g} {unit}", (x, v), ha="center", fontsize=8, textcoords="offset points", xytext=(0, 3))
        ax.set_title(f"kolo {measure.split(' (')[0]}\n(shared memory, timeline off)", fontsize=9)
        ax.set_ylabel(unit)
        ax.margins(y=0.15)
        ax.grid(axis="y", color="#DDDDDD", linewidth=0.5)
        ax.set_axisbelow(True)
    fig.suptitle(f"2 against 8 ranks: {src.label()}\n"
                 f"allreduce: {cost[2].name}, {cost[8].name}", fontsize=9)
    fig.tight_layout()
    save(fig, out, "scaling-np2-np8.png")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.path.join(here, "results"))
    ap.add_argument("--out", default=os.path.join(here, "..", "docs", "charts"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    one_host(a.results, a.out)
    two_hosts(a.results, a.out)
    training(a.results, a.out)
    scaling(a.results, a.out)


if __name__ == "__main__":
    main()
