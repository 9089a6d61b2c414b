"""Joins the rounds of bench/compare.sh into one table of medians.

usage: compare_table.py RAW [OUT.md]

RAW holds "<round> <anchor line>" lines, e.g.
    2 kolo n=2 bytes=4096 time_us=5.1 algbw_GBps=0.803 busbw_GBps=0.803
    2 before n=2 bytes=4096 time_us=5.0 algbw_GBps=0.819 busbw_GBps=0.819
    2 membw memcpy_64MiB_GBps=2.46
The columns are the systems RAW holds (kolo, before, mpi, gloo, in that order).
The table goes to stdout; with OUT.md, a markdown report with the machine
(from the environment compare.sh exports) goes there too.
"""
import os
import re
import statistics
import sys

ORDER = ("kolo", "before", "mpi", "gloo")
ANCHORS = ("mpi", "gloo")
NAMES = {"kolo": "kolo", "mpi": "Open MPI", "gloo": "PyTorch Gloo"}
LINE = re.compile(r"^(\d+) (\w+) n=(\d+) bytes=(\d+) time_us=([\d.]+) ")


def parse(path):
    times, membw, ranks, raw = {}, {}, set(), []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            raw.append(line)
            m = LINE.match(line)
            if m:
                _, system, n, nbytes, t = m.groups()
                ranks.add(int(n))
                times.setdefault((system, int(nbytes)), []).append(float(t))
                continue
            fields = line.split()
            if len(fields) >= 3 and fields[1] == "membw":
                for kv in fields[2:]:
                    k, _, v = kv.partition("=")
                    membw.setdefault(k, []).append(float(v))
    if len(ranks) != 1:
        sys.exit(f"compare_table.py: expected one rank count in {path}, found {sorted(ranks)}")
    systems = tuple(s for s in ORDER if any(k[0] == s for k in times))
    return times, membw, ranks.pop(), raw, systems


def ratio_columns(systems):
    # kolo/peer is a ratio of busbw (the peer's time over kolo's: above 1 kolo is faster);
    # after/before is one of time, kolo's over before's, so that 1.05 reads as "5% slower".
    return [f"kolo/{s}" for s in systems if s in ANCHORS] + (["after/before"] if "before" in systems else [])


def rows(times, n, systems):
    factor = 2 * (n - 1) / n
    sizes = sorted({b for (_, b) in times})
    out = []
    for b in sizes:
        t = {s: statistics.median(times[(s, b)]) if (s, b) in times else None for s in systems}
        # busbw from the median time (bytes/us = MB/s); ratios of busbw = inverse ratios of time.
        bw = {s: (b / t[s] / 1e3 * factor if t[s] else None) for s in systems}
        ratio = {f"kolo/{s}": (t[s] / t["kolo"] if t[s] and t.get("kolo") else None)
                 for s in systems if s in ANCHORS}
        if "before" in systems:
            ratio["after/before"] = t["kolo"] / t["before"] if t.get("kolo") and t["before"] else None
        out.append((b, t, bw, ratio))
    return out


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def head(systems):
    return (["bytes"] + [f"{s} time_us" for s in systems] + [f"{s} busbw" for s in systems]
            + ratio_columns(systems))


def cells(b, t, bw, ratio):
    return ([str(b)] + [fmt(x, ".1f") for x in t.values()] + [fmt(x, ".3f") for x in bw.values()]
            + [fmt(x, ".2f") for x in ratio.values()])


def text_table(table, systems):
    h = head(systems)
    width = [max(14, len(c) + 2) for c in h]
    lines = ["".join(f"{c:>{w}}" for c, w in zip(h, width))]
    for r in table:
        lines.append("".join(f"{c:>{w}}" for c, w in zip(cells(*r), width)))
    return "\n".join(lines)


def after_before(table):
    """The one-line summary of after/before over the sizes, or None without a before build."""
    rs = [(r[3]["after/before"], r[0]) for r in table if r[3].get("after/before")]
    if not rs:
        return None
    worst, best = max(rs), min(rs)
    label = os.environ.get("BEFORE_LABEL", "before")
    return (f"after/before (kolo's time over {label}'s, per size): median {statistics.median(r for r, _ in rs):.2f} "
            f"over {len(rs)} sizes; worst {worst[0]:.2f} at {human(worst[1])}, best {best[0]:.2f} at {human(best[1])}.")


def geomean(xs):
    xs = [x for x in xs if x]
    return statistics.geometric_mean(xs) if xs else None


def markdown(table, membw, n, raw, systems):
    e = os.environ.get
    anchors = [s for s in systems if s in ANCHORS]
    names = dict(NAMES, before=f"kolo {e('BEFORE_LABEL', 'before')} (before)")
    anchor_versions = {"mpi": e('MPI_VERSION', '?'), "gloo": f"PyTorch {e('TORCH_VERSION', '?')} (Gloo)"}
    before = "before" in systems
    copy = statistics.median(membw["memcpy_64MiB_GBps"]) if "memcpy_64MiB_GBps" in membw else None
    add = statistics.median(membw["sum_64MiB_payload_GBps"]) if "sum_64MiB_payload_GBps" in membw else None
    ceiling = copy * 2 * (n - 1) / n if copy else None
    big = [r for r in table if r[0] >= 1 << 20]
    out = [
        f"# allreduce, {n} ranks, f32 sum in place: {' vs '.join(names[s] for s in systems)}",
        "",
        f"- date: {e('DATE_UTC', '?')}; host label: {e('HOST_LABEL', '?')}",
        f"- machine: {e('CPU_MODEL', '?')}, {e('CPU_INFO', '?')}, {e('MEM_INFO', '?')} memory, {e('KERNEL', '?')}",
        f"- load average (1, 5, 15 min): {e('LOAD_START', '?')} at the start, {e('LOAD_END', '?')} at the end",
        f"- kolo: git {e('KOLO_REV', '?')}, build type {e('KOLO_BUILD_TYPE', '?')}"
        + (f"; anchors: {', '.join(anchor_versions[s] for s in anchors)}" if anchors else ""),
    ] + ([
        f"- before ({e('BEFORE_LABEL', 'before')}): git {e('BEFORE_REV', '?')}, build type "
        f"{e('BEFORE_BUILD_TYPE', '?')}, build {e('BEFORE', '?')}",
    ] if before else []) + [
        f"- memory-bandwidth ceiling (`membw.c`, one core, median of {len(membw.get('memcpy_64MiB_GBps', []))}): "
        f"memcpy {fmt(copy, '.2f')} GB/s, a+=b {fmt(add, '.2f')} GB/s. An allreduce must read every input "
        f"and write every output once; spread over {n} cores at the one-core memcpy rate, that bounds "
        f"busbw at about memcpy x 2(n-1)/n = {fmt(ceiling, '.2f')} GB/s.",
        "",
        "## Method",
        "",
        f"{e('ROUNDS', '?')} rounds in one run; each round runs every system on the sizes below 1 MiB, then on "
        "the rest, rotating which system goes first. Each system times its own loop after 3 warmup calls: "
        + (f"{e('ITERS_NOTE')}. " if e('ITERS_NOTE') else
           f"{e('SMALL_ITERS', '?')} iterations below 1 MiB, {e('LARGE_ITERS', '?')} from 1 MiB (the anchors' "
           "defaults). ") + "Times are the median over rounds of the mean time per call; busbw = bytes / time x "
        "2(n-1)/n is computed from that median, so the ratios "
        + ("(busbw of kolo over the peer, the peer's time over kolo's: above 1 means kolo is faster) "
           if anchors else "")
        + "come from the same run. "
        + ("after/before is a ratio of times, kolo's over the before build's: above 1 means the build under "
           "test is slower (kolo-bench prints times to 0.1 us, so at a few us it moves in steps of several "
           "per cent). Both builds run the same kolo-bench command line, each with its own kolorun and "
           "kolo-bench. " if before else "")
        + "kolo-bench reports the slowest rank's time (nccl-tests)"
        + (", the anchors rank 0's after a barrier" if anchors else "")
        + ". kolo-bench also checked every result (it exits non-zero on any wrong element).",
        "",
        "```",
    ] + [f"{s + ':':<5} {e('CMD_' + s.upper(), '?')}" for s in systems] + [
        f"{e('SETTINGS', '')} bench/compare.sh {e('BUILD', '')}",
        "```",
        "",
        "## Medians",
        "",
        "| " + " | ".join(head(systems)) + " |",
        "|" + "---:|" * len(head(systems)),
    ]
    for r in table:
        c = cells(*r)
        c[0] = f"{human(r[0])}"
        out.append("| " + " | ".join(c) + " |")
    if anchors:
        out += ["", "Geometric mean of the busbw ratios from 1 MiB on: " + ", ".join(
            f"kolo/{s} {fmt(geomean([r[3][f'kolo/{s}'] for r in big]), '.2f')}" for s in anchors) + "."]
    if before:
        out += ["", after_before(table) or "after/before: no size with both builds' times."]
    out += ["", "<details><summary>raw lines (round, system line)</summary>", "", "```"] + raw + ["```", "</details>", ""]
    return "\n".join(out)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    times, membw, n, raw, systems = parse(sys.argv[1])
    table = rows(times, n, systems)
    print(text_table(table, systems))
    if after_before(table):
        print(after_before(table))
    for k, v in sorted(membw.items()):
        print(f"membw {k} median {statistics.median(v):.2f}")
    if len(sys.argv) == 3 and sys.argv[2]:
        with open(sys.argv[2], "w") as f:
            f.write(markdown(table, membw, n, raw, systems))


if __name__ == "__main__":
    main()
