"""hvd.allreduce_ (f32 sum, in place) time per size, on whichever Horovod API
`import horovod.torch as hvd` resolves to (run it under hvd_as.py), in the anchors'
line format (../shared/anchors/README.md), rank 0 prints:

  <SYSTEM> n=<ranks> bytes=<bytes> time_us=<mean per op> algbw_GBps=... busbw_GBps=...

Env: SYSTEM (label, default hvd), SIZES (bytes, default "8 1048576 67108864 268435456"),
ITERS (default 200 below 1 MiB, 20 from 1 MiB on, as the anchors), WARMUP (3).

  STARTUP=1: no sizes; after hvd.init() and one 4-byte allreduce, rank 0 prints
  "startup first_collective_epoch=<time.time()>" (the harness subtracts its launch time)
  and the parts of it seen inside the process: import_s (interpreter start, as hvd_as.py
  saw it, to torch and the API imported), init_s (hvd.init()), first_s (the allreduce).
"""
import os
import time

import torch
import horovod.torch as hvd  # (hvd_as.py decides which implementation)

T_IMPORTED = time.time()
T_START = float(os.environ.get("HVD_AS_T0", T_IMPORTED))
hvd.init()
T_INIT = time.time()
rank, n = hvd.rank(), hvd.size()
torch.set_num_threads(1)
label = os.environ.get("SYSTEM", "hvd")

if os.environ.get("STARTUP") == "1":
    hvd.allreduce_(torch.ones(1), op=hvd.Sum, name="first")
    t = time.time()
    if rank == 0:
        print(f"{label} n={n} startup first_collective_epoch={t:.6f} import_s={T_IMPORTED - T_START:.3f} "
              f"init_s={T_INIT - T_IMPORTED:.3f} first_s={t - T_INIT:.3f}", flush=True)
    raise SystemExit(0)

sizes = [int(s) for s in os.environ.get("SIZES", "8 1048576 67108864 268435456").replace(",", " ").split()]
warmup = int(os.environ.get("WARMUP", "3"))
for nbytes in sizes:
    t = torch.ones(max(nbytes // 4, 1))
    name = f"ar{nbytes}"
    for _ in range(warmup):
        hvd.allreduce_(t, op=hvd.Sum, name=name)
    iters = int(os.environ.get("ITERS", 200 if nbytes < (1 << 20) else 20))
    hvd.allreduce_(torch.zeros(1), op=hvd.Sum, name="barrier")
    t0 = time.perf_counter()
    for _ in range(iters):
        hvd.allreduce_(t, op=hvd.Sum, name=name)
    dt = (time.perf_counter() - t0) / iters
    algbw = t.numel() * 4 / dt / 1e9
    if rank == 0:
        print(f"{label} n={n} bytes={t.numel() * 4} time_us={dt * 1e6:.1f} algbw_GBps={algbw:.3f} "
              f"busbw_GBps={algbw * 2 * (n - 1) / n:.3f}", flush=True)
    del t
