"""kolo-trace render: draws a kolo timeline (Chrome-trace JSON) as a PNG with matplotlib.

One band per rank, from the top: the caller's marks (DistributedOptimizer's backward,
synchronize and optimizer step), its gradient buckets in flight (issue to done; buckets
that overlap in time get lanes of their own), and per communicator the collectives with
their phases: queued on the engine (a thin bar below, since a queued op waits behind one
that runs), the wait for the slowest rank, then data movement and the reduction. The
pipelined algorithms interleave those two chunk by chunk; the file gives their sums
(move_us, reduce_us), so they are drawn as two adjacent parts in that proportion.

The window defaults to the middle three optimizer steps of rank 0 (step = from the end of
one "optimizer step" mark to the end of the next), or the whole trace without marks.
Kept apart from kolo-trace so that report and merge need only the standard library.
"""
import collections
import textwrap

import matplotlib

matplotlib.use("Agg")  # files only: no display on build machines
import matplotlib.patches as mpatches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

# Colour-blind-safe (Okabe-Ito) for the phases; muted tones for the caller's marks.
PHASES = [("queued", "#999999", "queued on the engine"),
          ("wait", "#D55E00", "wait for the slowest rank"),
          ("move", "#0072B2", "data movement"),
          ("reduce", "#009E73", "reduction (kernel time)")]
MARKS = {"backward": "#E69F00", "synchronize": "#CC79A7", "optimizer step": "#56B4E9"}
OTHER_MARK = "#BBBBBB"
BUCKET = "#F0E442"
DPI = 100
LEGEND_IN = 0.55  # the legend's strip at the bottom of the figure, inches


def spans(events):
    """Async b/e pairs (the caller's spans and the queued phases) as (event_b, end_ts)."""
    open_ = {}
    out = []
    for e in events:
        if e.get("ph") == "b":
            open_[(e.get("cat"), e.get("id"))] = e
        elif e.get("ph") == "e":
            b = open_.pop((e.get("cat"), e.get("id")), None)
            if b is not None:
                out.append((b, e["ts"]))
    return out


def default_window(marks, t0, steps):
    """Rank 0's middle `steps` optimizer steps, in ms from t0; None when it has too few."""
    ends = sorted(end for b, end in marks if b["pid"] == 0 and b["name"] == "optimizer step")
    if len(ends) < steps + 1:
        return None
    k = (len(ends) - steps) // 2
    lo, hi = ends[k], ends[k + steps]
    pad = 0.02 * (hi - lo)
    return (lo - pad - t0) / 1e3, (hi + pad - t0) / 1e3


def lanes(intervals):
    """Greedy packing of (begin, end, ...) tuples into lanes where none overlap: [(lane, tuple)]."""
    free_at = []
    out = []
    for item in sorted(intervals, key=lambda x: x[0]):
        begin, end = item[0], item[1]
        for i, t in enumerate(free_at):
            if t <= begin:
                free_at[i] = end
                break
        else:
            i = len(free_at)
            free_at.append(end)
        out.append((i, item))
    return out


def render(path, out, events, t_from=None, t_to=None, steps=3, title=None):
    """Writes the PNG; t_from/t_to in seconds from the trace's first event. Returns the window (ms)."""
    timed = [e for e in events if "ts" in e and e.get("ph") in ("X", "b", "e")]
    if not timed:
        raise ValueError(f"{path}: no timed events")
    t0 = min(e["ts"] for e in timed)
    async_spans = spans(timed)
    marks = [(b, end) for b, end in async_spans if b.get("cat") != "queued"]
    queued = [(b, end) for b, end in async_spans if b.get("cat") == "queued"]
    colls = [e for e in timed if e.get("cat") == "collective" and e.get("ph") == "X"]
    waits = {(e["pid"], e["args"].get("comm"), e["args"].get("seq")): e["dur"]
             for e in timed if e.get("cat") == "wait" and e.get("ph") == "X"}
    t_end = max(e["ts"] + e.get("dur", 0) for e in timed)

    if t_from is None and t_to is None:
        win = default_window(marks, t0, steps) or (0.0, (t_end - t0) / 1e3)
    else:
        win = ((t_from or 0.0) * 1e3, (t_to * 1e3) if t_to is not None else (t_end - t0) / 1e3)
    lo, hi = win
    if hi <= lo:
        raise ValueError(f"empty window {lo:.3f}..{hi:.3f} ms")

    def ms(ts):
        return (ts - t0) / 1e3

    def visible(b, e):
        return e >= lo and b <= hi

    ranks = sorted({e["pid"] for e in timed})
    bands = []  # (top, bottom) of each rank's rows
    bars = collections.defaultdict(list)  # colour -> [(x, w, y, h)]
    texts = []

    def bar(colour, b, e, y, h, text=None):
        if not visible(b, e):
            return
        # At least ~1 pixel wide: a µs collective stays visible in a window of seconds.
        bars[colour].append((b, max(e - b, (hi - lo) * 1e-3), y, h))
        shown = min(e, hi) - max(b, lo)  # a bar cut by the window gets its label only if it still fits
        if text and shown > 0.06 * (hi - lo):
            texts.append((max(b, lo) + shown / 2, y + h / 2, text))

    y = 0.0
    yticks = []
    for r in ranks:
        band_top = y
        # The caller's marks (one lane: backward, synchronize, step follow each other).
        mine = [(b, end) for b, end in marks if b["pid"] == r and not b["name"].startswith("bucket ")]
        if mine:
            for b, end in mine:
                colour = MARKS.get(b["name"], OTHER_MARK)
                bar(colour, ms(b["ts"]), ms(end), y, 0.8, b["name"])
            yticks.append((y + 0.4, f"rank {r}  marks"))
            y += 1
        buckets = [(ms(b["ts"]), ms(end), b["name"]) for b, end in marks
                   if b["pid"] == r and b["name"].startswith("bucket ")]
        if buckets:
            packed = lanes(buckets)
            n = 1 + max(i for i, _ in packed)
            h = 0.9 / n
            for i, (b, e, name) in packed:
                bar(BUCKET, b, e, y + i * h, h * 0.9, name.replace("bucket ", "b"))
            yticks.append((y + 0.4, f"rank {r}  buckets"))
            y += 1
        for tid in sorted({e["tid"] for e in colls if e["pid"] == r}):
            for e in (c for c in colls if c["pid"] == r and c["tid"] == tid):
                b, d = ms(e["ts"]), e["dur"] / 1e3
                a = e.get("args", {})
                w = min(d, waits.get((r, a.get("comm"), a.get("seq")), 0.0) / 1e3)
                red = min(d - w, a.get("reduce_us", 0.0) / 1e3)
                bar(PHASES[1][1], b, b + w, y, 0.6)
                bar(PHASES[2][1], b + w, b + d - red, y, 0.6, e["name"])
                bar(PHASES[3][1], b + d - red, b + d, y, 0.6)
            for q, end in queued:
                if q["pid"] == r and q["tid"] == tid:
                    bar(PHASES[0][1], ms(q["ts"]), ms(end), y + 0.65, 0.2)
            yticks.append((y + 0.4, f"rank {r}  collectives"))
            y += 1
        bands.append((band_top, y))
        y += 0.4  # gap between ranks

    fig_h = 1.0 + LEGEND_IN + 0.36 * y
    fig, ax = plt.subplots(figsize=(11, fig_h), dpi=DPI)
    for colour, items in bars.items():
        for x, w, yy, h in items:
            # A white hairline keeps back-to-back collectives apart.
            ax.broken_barh([(x, w)], (yy, h), facecolors=colour, edgecolors="white", linewidth=0.3)
    for x, yy, text in texts:
        ax.text(x, yy, text, ha="center", va="center", fontsize=6.5, clip_on=True)
    for top, _ in bands[1:]:
        ax.axhline(top - 0.2, color="#444444", linewidth=0.6)
    # Step boundaries: where rank 0's optimizer steps end.
    for b, end in marks:
        if b["pid"] == ranks[0] and b["name"] == "optimizer step" and lo <= ms(end) <= hi:
            ax.axvline(ms(end), color="#444444", linewidth=0.6, linestyle=":")
    ax.set_xlim(lo, hi)
    ax.set_ylim(y - 0.4, -0.2)  # rank 0 on top
    ax.set_yticks([t for t, _ in yticks], [l for _, l in yticks], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(f"ms since the trace's first event (dotted: rank {ranks[0]}'s optimizer steps end)"
                  if any(b["name"] == "optimizer step" for b, _ in marks) else "ms since the trace's first event")
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.5)
    ax.set_axisbelow(True)
    handles = [mpatches.Patch(color=c, label=l) for _, c, l in PHASES]
    handles += [mpatches.Patch(color=c, label=n) for n, c in MARKS.items()]
    handles.append(mpatches.Patch(color=BUCKET, label="bucket: issued to done"))
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8, frameon=False)
    ax.set_title(textwrap.fill(title or path, 150), fontsize=9)
    fig.tight_layout(rect=(0, LEGEND_IN / fig_h, 1, 1))
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return lo, hi
