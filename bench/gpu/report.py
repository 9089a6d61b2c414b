"""The table of bench/gpu/allreduce.py's results in DIR (copy.json,
kolo-PLANE-npN.json for the planes host and ipc, and ipc-inbox: the ipc plane
without its direct allreduce, gloo-npN.json), with the issue's goals checked: kolo >= 10x
gloo at >= 1 MiB; at 64 MiB on 2 ranks an allreduce within 3x the time of one
device-to-device copy of the buffer; an 8-byte allreduce <= 20 us. And
bench/gpu/ddp_step.py's DDP step (ddp-kolo-PLANE-np2.json, ddp-gloo-np2.json):
kolo >= 2x gloo.

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
    print("Each rank holds a float32 CUDA tensor on the one GPU; times are medians of timed rounds "
          "(bench/gpu/allreduce.py --reps); `copy` is one device-to-device copy of the buffer.\n")
    goals = []
    for np_ in (2, 4):
        gloo = by_bytes(load(d, f"gloo-np{np_}.json"))
        planes = {p: by_bytes(load(d, f"kolo-{p}-np{np_}.json")) for p in ("host", "ipc", "ipc-inbox")}
        planes = {p: k for p, k in planes.items() if k}
        if not planes:
            continue
        print(f"## {np_} ranks sharing the GPU\n")
        head = " | ".join(f"kolo {p} µs | gloo / kolo {p}" for p in planes)
        print(f"| size | gloo µs | {head} | copy µs | best kolo / copy |")
        print("|---:|---:|" + "---:|---:|" * len(planes) + "---:|---:|")
        for b in sorted(next(iter(planes.values()))):
            gl, cp = gloo.get(b), copy_us.get(b)
            cells = []
            for k in planes.values():
                t = k.get(b)
                cells += [f"{t:.1f}" if t else "–", f"{gl / t:.1f}×" if gl and t else "–"]
            best = min(k[b] for k in planes.values() if b in k)
            print(f"| {size(b)} | {gl:.1f} | " if gl else f"| {size(b)} | – | ", end="")
            print(" | ".join(cells) + (f" | {cp:.1f} | {best / cp:.1f}× |" if cp else " | – | – |"))
            if gl and b >= (1 << 20):
                goals.append((f"{np_} ranks, {size(b)}: kolo ≥ 10× gloo", gl / best >= 10, f"{gl / best:.1f}×"))
        print()
        if np_ == 2 and (64 << 20) in copy_us:
            best = min(k[64 << 20] for k in planes.values() if (64 << 20) in k)
            r = best / copy_us[64 << 20]
            goals.append(("2 ranks, 64 MiB: within 3× one device-to-device copy", r <= 3, f"{r:.1f}×"))
        best8 = [k[8] for k in planes.values() if 8 in k]
        if best8:
            goals.append((f"{np_} ranks, 8 B: ≤ 20 µs", min(best8) <= 20, f"{min(best8):.1f} µs"))
    ddp = {name: load(d, f"ddp-{name}-np2.json") for name in ("gloo", "kolo-host", "kolo-ipc")}
    ddp = {k: v for k, v in ddp.items() if v}
    if "gloo" in ddp and len(ddp) > 1:
        first = next(iter(ddp.values()))
        print("## DDP training step, 2 ranks sharing the GPU\n")
        print(f"bench/gpu/ddp_step.py: ResNet-18's layers ({first['params'] / 1e6:.1f} M parameters), 32x32 "
              f"synthetic images, batch {first['batch']} per rank, SGD; median of the timed steps.\n")
        print("| backend | step ms | gloo / this |")
        print("|---|---:|---:|")
        gl = ddp["gloo"]["step_ms"]
        for k, v in ddp.items():
            print(f"| {k} | {v['step_ms']:.1f} | {gl / v['step_ms']:.2f}× |")
        print()
        best = min(v["step_ms"] for k, v in ddp.items() if k != "gloo")
        goals.append(("DDP step, 2 ranks: kolo ≥ 2× gloo", gl / best >= 2, f"{gl / best:.2f}×"))
    print("## Goals\n")
    print("| goal | met | measured |")
    print("|---|---|---|")
    for what, ok, got in goals:
        print(f"| {what} | {'yes' if ok else '**no**'} | {got} |")


if __name__ == "__main__":
    main()
