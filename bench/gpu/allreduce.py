"""GPU allreduce on CUDA tensors, 8 B to 256 MiB: kolo (kolo.torch) or torch's
gloo backend, on the same tensors; and the device's own device-to-device copy
rate, the yardstick (an allreduce must at least read and write its buffer).

  kolorun -np 2 python bench/gpu/allreduce.py --system kolo --out kolo.json
  python -m torch.distributed.run --nproc_per_node 2 bench/gpu/allreduce.py --system gloo --out gloo.json
  python bench/gpu/allreduce.py --system copy --out copy.json       (one process)

Each size: warm-up, then `--reps` timed rounds of `--iters` allreduces (each
round ends with torch.cuda.synchronize()); the median round / iters is the
time of one. Results are checked (the sum of every rank's input). Rank 0 writes
{"system", "ranks", "device", "rows": [{"bytes", "us", "busbw_gbs"}]}.
"""
import argparse
import json
import os
import statistics
import time

import torch

SIZES = [8 * 4 ** k for k in range(15)] + [256 << 20]  # 8 B ... 128 MiB, 256 MiB


def iters_for(nbytes):
    return 50 if nbytes <= (1 << 20) else (10 if nbytes <= (32 << 20) else 3)


def timed(fn, iters, reps):
    rounds = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / iters)
    return statistics.median(rounds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", choices=["kolo", "gloo", "copy"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    a = ap.parse_args()
    sizes = [s for s in SIZES if s <= a.max_bytes]
    if a.system == "kolo":
        import kolo.torch as hvd
        hvd.init()
        rank, n, local = hvd.rank(), hvd.size(), hvd.local_rank()
    elif a.system == "gloo":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, n, local = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    else:
        rank, n, local = 0, 1, 0
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    rows = []
    for nbytes in sizes:
        count = max(1, nbytes // 4)
        x = torch.full((count,), float(rank + 1), device=dev)
        if a.system == "copy":
            y = torch.empty_like(x)
            fn = lambda: y.copy_(x)  # noqa: E731
        elif a.system == "kolo":
            fn = lambda: hvd.allreduce_(x, op=hvd.Sum)  # noqa: E731
        else:
            fn = lambda: dist.all_reduce(x)  # noqa: E731
        iters = iters_for(nbytes)
        fn()  # warm-up (and the first round's allocations)
        t = timed(fn, iters, a.reps)
        if a.system != "copy":  # x was summed 1 + iters*reps + 1 times over: check one more exactly
            x.fill_(float(rank + 1))
            fn()
            want = n * (n + 1) / 2
            if not bool((x == want).all()):
                raise SystemExit(f"{a.system}: wrong allreduce result at {nbytes} bytes: {x[:4].tolist()}")
        busbw = (2 * (n - 1) / n if n > 1 else 2) * count * 4 / t / 1e9
        rows.append({"bytes": count * 4, "us": t * 1e6, "busbw_gbs": busbw})
        if rank == 0:
            print(f"{a.system} n={n} {count * 4:>11} B  {t * 1e6:10.1f} us  {busbw:8.2f} GB/s", flush=True)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"system": a.system, "ranks": n, "device": torch.cuda.get_device_name(dev),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
