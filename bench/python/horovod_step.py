"""The anchor's Fashion-MNIST training step (/work/shared/anchors/ddp_fashion_mnist.py:
same models, data slicing, SGD settings, warm-up and timing) written with
kolo's Horovod API: hvd.DistributedOptimizer instead of DDP. Rank 0 prints
samples/s in the anchor's format. Start it with kolorun (any -np).

Env: MODEL (cnn: conv32-conv64-fc128; mlp: 784-4096-4096-10), THREADS (1),
STEPS (60, timed), WARMUP (5, untimed steps before them; autotune_sweep.py sets
it past KOLO_AUTOTUNE's trials), BATCH (per rank, 64), DATA (dataset dir).
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))
from fashion_mnist_data import DEFAULT_DIR, MEAN, STD, dataset  # noqa: E402
from anchor_models import model as anchor_model  # noqa: E402

import kolo.torch as hvd  # noqa: E402


hvd.init()
rank, ws = hvd.rank(), hvd.size()
torch.set_num_threads(int(os.environ.get("THREADS", "1")))
X, Y = dataset(os.environ.get("DATA", DEFAULT_DIR), "train").tensors
X = X * STD + MEAN  # the anchor trains on unnormalised [0, 1] pixels
torch.manual_seed(0)
kind = os.environ.get("MODEL", "cnn")
model = anchor_model(kind)
opt = torch.optim.SGD(model.parameters(), lr=0.01 * ws, momentum=0.9)
if ws > 1:
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), op=hvd.Average)
B, steps = int(os.environ.get("BATCH", "64")), int(os.environ.get("STEPS", "60"))
warmup = int(os.environ.get("WARMUP", "5"))
idx = torch.arange(rank, len(X), ws)
for s in range(steps + warmup):
    if s == warmup:
        t0 = time.perf_counter()
    start = (s * B) % (len(idx) - B)
    b = idx[start:start + B]
    opt.zero_grad()
    loss = F.cross_entropy(model(X[b]), Y[b])
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
if rank == 0:
    # The bucket layout the steps ran with (KOLO_AUTOTUNE's choice, when on): elements per bucket
    # (kolo's; under Horovod, through bench/horovod/hvd_as.py, the optimizer has no _buckets).
    buckets = getattr(opt, "_buckets", None) if ws > 1 else None
    layout = "-".join(str(sum(p.numel() for p in b)) for b in buckets) if buckets is not None else "none"
    print(f"kolo-hvd model={kind} n={ws} batch={B} threads={torch.get_num_threads()} "
          f"samples_per_s={steps * B * ws / dt:.0f} loss={loss.item():.3f} layout={layout}", flush=True)
