"""The table of bench/gpu/allreduce.py's results in DIR (copy.json,
kolo-npN.json, gloo-npN.json), with the issue's goals checked: kolo >= 10x
gloo at >= 1 MiB; at 64 MiB on 2 ranks an allreduce within 3x the time of one
device-to-device copy of the buffer; an 8-byte allreduce <= 20 us.

  python bench/gpu/report.py DIR > DIR/bench-gpu.md"""
import json
import os
import sys


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def by_bytes(res):
    return {r["bytes"]: r["us"] for r in res["rows"]} if res else {}


def size(b):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b // k} {unit}"
    return f"{b} B"


def main():
    d = sys.argv[1]
    copy = load(d, "copy.json")
    copy_us = by_bytes(copy)
    device = copy["device"] if copy else "?"
    print(f"# GPU allreduce on CUDA tensors: kolo vs torch's gloo, {device}\n")
    print("Each rank holds a float32 CUDA tensor on the one GPU; times are medians of 5 rounds "
          "(bench/gpu/allreduce.py); `copy` is one device-to-device copy of the buffer.\n")
    goals = []
    for np_ in (2, 4):
        kolo, gloo = load(d, f"kolo-np{np_}.json"), load(d, f"gloo-np{np_}.json")
        if not kolo:
            continue
        k, g = by_bytes(kolo), by_bytes(gloo)
        print(f"## {np_} ranks sharing the GPU\n")
        print("| size | kolo µs | gloo µs | gloo / kolo | copy µs | kolo / copy |")
        print("|---:|---:|---:|---:|---:|---:|")
        for b in sorted(k):
            gl = g.get(b)
            ratio = f"{gl / k[b]:.1f}×" if gl else "–"
            cp = copy_us.get(b)
            print(f"| {size(b)} | {k[b]:.1f} | {gl:.1f} | {ratio} | {cp:.1f} | {k[b] / cp:.1f}× |" if gl and cp else
                  f"| {size(b)} | {k[b]:.1f} | {gl or '–'} | {ratio} | {cp or '–'} | – |")
            if gl and b >= (1 << 20):
                goals.append((f"{np_} ranks, {size(b)}: kolo ≥ 10× gloo", gl / k[b] >= 10, f"{gl / k[b]:.1f}×"))
        print()
        if np_ == 2 and (64 << 20) in k and (64 << 20) in copy_us:
            r = k[64 << 20] / copy_us[64 << 20]
            goals.append(("2 ranks, 64 MiB: within 3× one device-to-device copy", r <= 3, f"{r:.1f}×"))
        if 8 in k:
            goals.append((f"{np_} ranks, 8 B: ≤ 20 µs", k[8] <= 20, f"{k[8]:.1f} µs"))
    print("## Goals\n")
    print("| goal | met | measured |")
    print("|---|---|---|")
    for what, ok, got in goals:
        print(f"| {what} | {'yes' if ok else '**no**'} | {got} |")


if __name__ == "__main__":
    main()
