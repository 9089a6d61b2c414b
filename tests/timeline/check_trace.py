#!/usr/bin/env python3
"""Checks a timeline file of timeline_prog (timeline_test.sh): valid JSON, every
rank's collectives in order with their arguments, the caller's span, queued
asynchronous ops, and (--straggler R) the wait for rank R on every other rank."""
import argparse
import json
import sys

EXPECTED = ["allreduce grad.a", "allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall",
            "barrier", "allreduce", "allreduce", "allreduce", "allreduce straggle"]
LARGE = {"shm": "chunked", "tcp": "ring", "hier": "sharded"}


def fail(msg):
    sys.exit(f"check_trace: {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--transport", required=True)
    ap.add_argument("--straggler", type=int)
    ap.add_argument("--sleep-ms", type=float, default=300)
    a = ap.parse_args()
    with open(a.file) as f:
        trace = json.load(f)  # a torn or unterminated file fails here
    events = trace["traceEvents"]
    straggle = {}
    for r in range(a.ranks):
        colls = sorted((e for e in events if e.get("cat") == "collective" and e["pid"] == r),
                       key=lambda e: e["args"]["seq"])
        names = [e["name"] for e in colls]
        if names != EXPECTED:
            fail(f"rank {r}: collectives {names}, expected {EXPECTED}")
        for e in colls:
            args = e["args"]
            if e["ph"] != "X" or e["dur"] < 0 or args["transport"] != a.transport:
                fail(f"rank {r}: bad span {e}")
            if e["name"] != "barrier" and args["bytes"] <= 0:
                fail(f"rank {r}: {e['name']} without bytes: {e}")
        if colls[0]["args"].get("name") != "grad.a" or colls[0]["args"]["algorithm"] != "oneshot":
            fail(f"rank {r}: first allreduce {colls[0]}")
        if colls[1]["args"]["algorithm"] != LARGE[a.transport] or colls[1]["args"]["bytes"] != 4 << 20:
            fail(f"rank {r}: large allreduce {colls[1]}")
        if colls[2]["args"].get("root") != 0 or colls[1]["args"]["op"] != "average":
            fail(f"rank {r}: arguments {colls[1]} {colls[2]}")
        spans = [e for e in events if e.get("cat") == "test" and e["pid"] == r]
        if [e["ph"] for e in spans] != ["b", "e"] or spans[0]["name"] != "step":
            fail(f"rank {r}: the caller's span: {spans}")
        if not any(e.get("cat") == "queued" and e["pid"] == r for e in events):
            fail(f"rank {r}: no queued asynchronous op")
        straggle[r] = colls[-1]
    # Clocks aligned: every rank leaves the straggle allreduce after the last
    # one arrived, within a few ms of each other.
    ends = [e["ts"] + e["dur"] for e in straggle.values()]
    if max(ends) - min(ends) > 50e3:
        fail(f"the ranks' clocks disagree: straggle ends at {ends}")
    if a.straggler is not None:
        for r, e in straggle.items():
            waits = [w for w in events if w.get("cat") == "wait" and w["pid"] == r
                     and w["args"]["seq"] == e["args"]["seq"] and w["args"]["comm"] == e["args"]["comm"]]
            if r == a.straggler:
                if waits:
                    fail(f"rank {r} slept but waited: {waits}")
                continue
            if len(waits) != 1 or waits[0]["name"] != f"wait for rank {a.straggler}" \
                    or waits[0]["dur"] < 0.5 * a.sleep_ms * 1e3:
                fail(f"rank {r}: no wait for rank {a.straggler} in the straggle allreduce: {waits}")
    print(f"check_trace: {a.file}: {a.ranks} ranks, {len(events)} events: ok")


if __name__ == "__main__":
    main()
