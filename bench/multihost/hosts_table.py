"""Joins the rounds of bench/multihost/allreduce_hosts.sh into tables of medians and goals.

usage: hosts_table.py RAW [OUT.md]

RAW holds lines such as
    shaped 2 kolo_hier n=4 bytes=4096 time_us=51.0 algbw_GBps=0.080 busbw_GBps=0.120
    shaped 2 kolo_hier header # kolo-bench allreduce: 4 ranks, transport tcp, in place, blocking
    shaped 2 link dir=fwd bps=1912000000
The tables go to stdout; with OUT.md, a markdown report with the machine (from the
environment allreduce_hosts.sh exports) goes there too.

Link bound: with H hosts each host sends and receives 2(H-1)/H * n bytes of an n-byte
allreduce, so for H = 2 the time is at least n / (link rate); "% of link" is
(n / time) / (link rate in bytes/s). busbw follows nccl-tests (algbw * 2(P-1)/P, P ranks).
"""
import os
import platform
import re
import statistics
import subprocess
import sys
import time

SYSTEMS = ("kolo_hier", "kolo_flat", "mpi", "gloo")
NAMES = {"kolo_hier": "kolo hier", "kolo_flat": "kolo flat", "mpi": "Open MPI", "gloo": "Gloo"}
HOSTS = 2
LINE = re.compile(r"^(\w+) (\d+) (\w+) n=(\d+) bytes=(\d+) time_us=([\d.]+) ")
# Goals of issue 11, checked on the shaped link.
GOAL_LINK, GOAL_LINK_FROM = 0.90, 16 << 20
GOAL_MPI, GOAL_GLOO, GOAL_PEERS_FROM = 1.5, 3.0, 1 << 20
GOAL_HIER, GOAL_HIER_FROM = 1.4, 16 << 20


def parse(path):
    times, links, headers, ranks = {}, {}, {}, set()
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = LINE.match(line)
            if m:
                link, _, system, n, nbytes, t = m.groups()
                ranks.add(int(n))
                times.setdefault((link, system, int(nbytes)), []).append(float(t))
                continue
            fields = line.split(maxsplit=4)
            if len(fields) >= 5 and fields[3] == "header":
                headers.setdefault((fields[0], fields[2]), set()).add(fields[4].lstrip("# "))
            elif len(fields) >= 5 and fields[2] == "link":
                kv = dict(x.split("=", 1) for x in line.split()[3:])
                links.setdefault(fields[0], {}).setdefault(kv["dir"], []).append(int(kv["bps"]))
    if len(ranks) != 1:
        sys.exit(f"hosts_table.py: expected one rank count in {path}, found {sorted(ranks)}")
    return times, links, headers, ranks.pop()


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def link_rate(links, link):
    """The link's rate in bytes/s: the slower direction's median, or None."""
    dirs = links.get(link, {})
    if not dirs:
        return None
    return min(statistics.median(v) for v in dirs.values()) / 8


def table(times, links, link, n):
    factor = 2 * (n - 1) / n
    rate = link_rate(links, link)
    sizes = sorted({b for (l, _, b) in times if l == link})
    rows, out = [], []
    out.append(f"| size | kolo hier time | % of link | " + " | ".join(f"{NAMES[s]} busbw" for s in SYSTEMS)
               + " | hier / flat | kolo / MPI | kolo / Gloo |")
    out.append("|" + "---|" * (6 + len(SYSTEMS)))
    for b in sizes:
        t = {s: statistics.median(times[(link, s, b)]) if (link, s, b) in times else None for s in SYSTEMS}
        bw = {s: (b / t[s] / 1e3 * factor if t[s] else None) for s in SYSTEMS}
        k = t["kolo_hier"]
        of_link = (b / (k * 1e-6)) / rate if k and rate else None
        r = {s: (t[s] / k if t[s] and k else None) for s in ("kolo_flat", "mpi", "gloo")}
        rows.append((b, t, of_link, r))
        out.append(f"| {human(b)} | {fmt(k, '.1f')} µs | {fmt(of_link and of_link * 100, '.0f')} % | "
                   + " | ".join(f"{fmt(bw[s], '.3f')} GB/s" for s in SYSTEMS)
                   + f" | {fmt(r['kolo_flat'], '.2f')}× | {fmt(r['mpi'], '.2f')}× | {fmt(r['gloo'], '.2f')}× |")
    return out, rows


def goals(rows):
    """Lines saying, for each goal, whether the shaped run met it and its worst value."""
    def check(name, goal, vals):
        vals = [(b, v) for b, v in vals if v is not None]
        if not vals:
            return f"- {name}: no data"
        b, worst = min(vals, key=lambda x: x[1])
        verdict = "met" if worst >= goal else "NOT met"
        return f"- {name} (goal ≥ {goal:g}): {verdict}; worst {worst:.2f} at {human(b)}"
    return [
        check(f"kolo hier: fraction of the link bound from {human(GOAL_LINK_FROM)}", GOAL_LINK,
              [(b, l) for b, _, l, _ in rows if b >= GOAL_LINK_FROM]),
        check(f"kolo hier / Open MPI busbw from {human(GOAL_PEERS_FROM)}", GOAL_MPI,
              [(b, r["mpi"]) for b, _, _, r in rows if b >= GOAL_PEERS_FROM]),
        check(f"kolo hier / Gloo busbw from {human(GOAL_PEERS_FROM)}", GOAL_GLOO,
              [(b, r["gloo"]) for b, _, _, r in rows if b >= GOAL_PEERS_FROM]),
        check(f"kolo hier / kolo flat from {human(GOAL_HIER_FROM)}", GOAL_HIER,
              [(b, r["kolo_flat"]) for b, _, _, r in rows if b >= GOAL_HIER_FROM]),
    ]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    times, links, headers, n = parse(sys.argv[1])
    report = []
    for link in ("shaped", "unshaped"):
        if not any(l == link for (l, _, _) in times):
            continue
        rate = link_rate(links, link)
        dirs = ", ".join(f"{d} {statistics.median(v) / 1e9:.2f} Gbit/s"
                         for d, v in sorted(links.get(link, {}).items()))
        title = f"{link} link" + (f" ({os.environ.get('RATE', '')} tbf)" if link == "shaped" else "")
        report.append(f"### {title}: iperf3 {dirs or '-'}; link bound {fmt(rate and rate / 1e9, '.3f')} GB/s algbw")
        report.append("")
        for s in ("kolo_hier", "kolo_flat"):
            for h in sorted(headers.get((link, s), ())):
                report.append(f"{NAMES[s]}: `{h}`  ")
        report.append("")
        lines, rows = table(times, links, link, n)
        report += lines
        report.append("")
        if link == "shaped":
            report.append("Goals (shaped link):")
            report += goals(rows)
            report.append("")
    text = "\n".join(report)
    print(text)
    if len(sys.argv) == 3 and sys.argv[2]:
        e = os.environ.get
        with open(sys.argv[2], "w") as f:
            f.write(f"# Allreduce across 2 emulated hosts × 2 ranks ({e('HOST_LABEL', '?')}, "
                    f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\n")
            f.write("f32 sum in place, 4 ranks (2 per host, network namespaces on one machine joined by a bridge; "
                    "see tests/multihost/hosts.sh). Medians over rounds; ratios are of same-run medians "
                    "(busbw ratio = inverse time ratio).\n\n")
            f.write(f"- machine: {machine()}\n")
            f.write(f"- kolo {e('KOLO_REV', '?')} (kolo ranks started by {e('LAUNCH', '?')}); "
                    f"{command_line(['mpirun', '--version'])}; PyTorch "
                    f"{command_line(['/usr/bin/python3', '-c', 'import torch; print(torch.__version__)'])} Gloo\n")
            f.write(f"- settings: {e('SETTINGS', '?')}; {e('ITERS_NOTE', '')}\n")
            f.write(f"- load average {e('LOAD_START', '?')} at start, {e('LOAD_END', '?')} at end\n")
            f.write("- command: `bench/multihost/allreduce_hosts.sh`\n\n")
            f.write(text + "\n")
            with open(sys.argv[1]) as raw:
                f.write("\n<details><summary>every run (link, round, system, result)</summary>\n\n```\n"
                        + raw.read() + "```\n</details>\n")


def command_line(cmd):
    """First output line of cmd, or '?'."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
        return out.splitlines()[0] if out else "?"
    except OSError:
        return "?"


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return f"{model}, {os.cpu_count()} CPUs, {mem_kib / 2**20:.1f} GiB, {platform.system()} {platform.release()}"

if __name__ == "__main__":
    main()
