"""Joins the rounds of bench/compare.sh into one table of medians.

usage: compare_table.py RAW [OUT.md]

RAW holds "<round> <anchor line>" lines, e.g.
    2 kolo n=2 bytes=4096 time_us=5.1 algbw_GBps=0.803 busbw_GBps=0.803
    2 membw memcpy_64MiB_GBps=2.46
The table goes to stdout; with OUT.md, a markdown report with the machine
(from the environment compare.sh exports) goes there too.
"""
import os
import re
import statistics
import sys

SYSTEMS = ("kolo", "mpi", "gloo")
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
    return times, membw, ranks.pop(), raw


def rows(times, n):
    factor = 2 * (n - 1) / n
    sizes = sorted({b for (_, b) in times})
    out = []
    for b in sizes:
        t = {s: statistics.median(times[(s, b)]) if (s, b) in times else None for s in SYSTEMS}
        # busbw from the median time (bytes/us = MB/s); ratios of busbw = inverse ratios of time.
        bw = {s: (b / t[s] / 1e3 * factor if t[s] else None) for s in SYSTEMS}
        ratio = {s: (t[s] / t["kolo"] if t[s] and t["kolo"] else None) for s in ("mpi", "gloo")}
        out.append((b, t, bw, ratio))
    return out


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


HEAD = ("bytes", "kolo time_us", "mpi time_us", "gloo time_us", "kolo busbw", "mpi busbw",
        "gloo busbw", "kolo/mpi", "kolo/gloo")


def cells(b, t, bw, ratio):
    return ([str(b)] + [fmt(t[s], ".1f") for s in SYSTEMS] + [fmt(bw[s], ".3f") for s in SYSTEMS]
            + [fmt(ratio["mpi"], ".2f"), fmt(ratio["gloo"], ".2f")])


def text_table(table):
    lines = ["".join(f"{h:>14}" for h in HEAD)]
    for r in table:
        lines.append("".join(f"{c:>14}" for c in cells(*r)))
    return "\n".join(lines)


def geomean(xs):
    xs = [x for x in xs if x]
    return statistics.geometric_mean(xs) if xs else None


def markdown(table, membw, n, raw):
    e = os.environ.get
    copy = statistics.median(membw["memcpy_64MiB_GBps"]) if "memcpy_64MiB_GBps" in membw else None
    add = statistics.median(membw["sum_64MiB_payload_GBps"]) if "sum_64MiB_payload_GBps" in membw else None
    ceiling = copy * 2 * (n - 1) / n if copy else None
    big = [r for r in table if r[0] >= 1 << 20]
    out = [
        f"# allreduce, {n} ranks, f32 sum in place: kolo vs Open MPI vs PyTorch Gloo",
        "",
        f"- date: {e('DATE_UTC', '?')}; host label: {e('HOST_LABEL', '?')}",
        f"- machine: {e('CPU_MODEL', '?')}, {e('CPU_INFO', '?')}, {e('MEM_INFO', '?')} memory, {e('KERNEL', '?')}",
        f"- load average (1, 5, 15 min): {e('LOAD_START', '?')} at the start, {e('LOAD_END', '?')} at the end",
        f"- kolo: git {e('KOLO_REV', '?')}, build type {e('KOLO_BUILD_TYPE', '?')}; "
        f"anchors: {e('MPI_VERSION', '?')}, PyTorch {e('TORCH_VERSION', '?')} (Gloo)",
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
        "2(n-1)/n is computed from that median, so the ratios (busbw of kolo over the peer, the peer's "
        "time over kolo's: above 1 means kolo is faster) come from the same run. kolo-bench reports the "
        "slowest rank's time (nccl-tests), the anchors rank 0's after a barrier. kolo-bench also checked "
        "every result (it exits non-zero on any wrong element).",
        "",
        "```",
        f"kolo: {e('CMD_KOLO', '?')}",
        f"mpi:  {e('CMD_MPI', '?')}",
        f"gloo: {e('CMD_GLOO', '?')}",
        f"{e('SETTINGS', '')} bench/compare.sh {e('BUILD', '')}",
        "```",
        "",
        "## Medians",
        "",
        "| " + " | ".join(HEAD) + " |",
        "|" + "---:|" * len(HEAD),
    ]
    for r in table:
        c = cells(*r)
        c[0] = f"{human(r[0])}"
        out.append("| " + " | ".join(c) + " |")
    gm_mpi = geomean([r[3]["mpi"] for r in big])
    gm_gloo = geomean([r[3]["gloo"] for r in big])
    out += ["", f"Geometric mean of the busbw ratios from 1 MiB on: kolo/mpi {fmt(gm_mpi, '.2f')}, "
            f"kolo/gloo {fmt(gm_gloo, '.2f')}.", "",
            "<details><summary>raw lines (round, system line)</summary>", "", "```"] + raw + ["```", "</details>", ""]
    return "\n".join(out)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    times, membw, n, raw = parse(sys.argv[1])
    table = rows(times, n)
    print(text_table(table))
    for k, v in sorted(membw.items()):
        print(f"membw {k} median {statistics.median(v):.2f}")
    if len(sys.argv) == 3 and sys.argv[2]:
        with open(sys.argv[2], "w") as f:
            f.write(markdown(table, membw, n, raw))


if __name__ == "__main__":
    main()
