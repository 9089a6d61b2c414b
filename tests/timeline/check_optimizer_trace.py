#!/usr/bin/env python3
"""Checks the timeline of torch_rank_prog's equiv mode (timeline_test.sh torch): on every
rank, each step's marks from kolo_torch's DistributedOptimizer — "backward", one "bucket i"
per bucket, "synchronize", "optimizer step" — in that order; each bucket's allreduce named
after it, inside its span and of its size; and the buckets issued during backward exactly
in the steps the optimizer overlapped (--modes: the program's --print-overlap string)."""
import argparse
import json
import sys

EPS = 0.002  # µs: the file's timestamps are rounded to ns


def fail(msg):
    sys.exit(f"check_optimizer_trace: {msg}")


def spans(events, rank):
    """The rank's "torch" spans as (name, begin, end, args), by begin; b/e pairs joined by id."""
    begin = {e["id"]: e for e in events if e.get("cat") == "torch" and e["pid"] == rank and e["ph"] == "b"}
    out = []
    for e in events:
        if e.get("cat") == "torch" and e["pid"] == rank and e["ph"] == "e":
            b = begin.pop(e["id"])
            out.append((b["name"], b["ts"], e["ts"], b.get("args", {})))
    if begin:
        fail(f"rank {rank}: spans without an end: {list(begin.values())}")
    return sorted(out, key=lambda s: s[1])


def check_rank(events, rank, modes, min_buckets):
    marks = spans(events, rank)
    colls = [e for e in events if e.get("cat") == "collective" and e["pid"] == rank]
    steps = {n: [s for s in marks if s[0] == n] for n in ("backward", "synchronize", "optimizer step")}
    for name, found in steps.items():
        if len(found) != len(modes):
            fail(f"rank {rank}: {len(found)} '{name}' spans for {len(modes)} steps: {marks}")
    buckets = [s for s in marks if s[0].startswith("bucket ")]
    nb = len(buckets) // len(modes)
    if nb < min_buckets or len(buckets) != nb * len(modes):
        fail(f"rank {rank}: {len(buckets)} bucket spans in {len(modes)} steps (at least {min_buckets} each)")
    prev_end = float("-inf")
    for k, mode in enumerate(modes):
        bw, sync, opt = (steps[n][k] for n in ("backward", "synchronize", "optimizer step"))
        if not (prev_end - EPS <= bw[1] <= bw[2] and abs(bw[2] - sync[1]) <= EPS
                and sync[2] - EPS <= opt[1] <= opt[2]):
            fail(f"rank {rank} step {k}: out of order: {bw} {sync} {opt} (previous step ended {prev_end})")
        prev_end = opt[2]
        mine = sorted((s for s in buckets if bw[1] - EPS <= s[1] <= sync[2]), key=lambda s: s[0])
        if [s[0] for s in mine] != sorted(f"bucket {i}" for i in range(nb)):
            fail(f"rank {rank} step {k}: buckets {[s[0] for s in mine]}, expected 0..{nb - 1}")
        for name, b, e, args in mine:
            if e > sync[2] + EPS:
                fail(f"rank {rank} step {k}: {name} ends after synchronize")
            inside = [c for c in colls if c["name"] == "allreduce " + name
                      and b - EPS <= c["ts"] and c["ts"] + c["dur"] <= e + EPS]
            if len(inside) != 1 or inside[0]["args"]["bytes"] != args.get("bytes"):
                fail(f"rank {rank} step {k}: {name} ({b}..{e}, {args}) holds allreduces {inside}")
        first_issue = min(s[1] for s in mine)
        if mode == "+" and first_issue >= bw[2]:
            fail(f"rank {rank} step {k}: overlapped, but no bucket was issued during backward")
        if mode == "-" and first_issue < sync[1] - EPS:
            fail(f"rank {rank} step {k}: not overlapped, but a bucket was issued during backward")
    return nb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--modes", required=True, help="one + (overlapped) or - per step")
    ap.add_argument("--min-buckets", type=int, default=2)
    a = ap.parse_args()
    with open(a.file) as f:
        events = json.load(f)["traceEvents"]
    counts = {check_rank(events, r, a.modes, a.min_buckets) for r in range(a.ranks)}
    if len(counts) != 1:
        fail(f"the ranks have different numbers of buckets: {counts}")
    print(f"check_optimizer_trace: {a.file}: {a.ranks} ranks, {len(a.modes)} steps ({a.modes}), "
          f"{counts.pop()} buckets a step: ok")


if __name__ == "__main__":
    main()
