"""SyncBatchNorm on N ranks equals BatchNorm on one process over the global
batch: forward output, running statistics, input gradients and (summed over
ranks) weight/bias gradients, for (N, C) and (N, C, H, W) inputs, uneven
per-rank batches (on 3 ranks one rank holds no samples), momentum 0.1 and
None (cumulative), float64 (tight) and float32; then eval mode.
Every rank builds the global batch from a seed and computes the reference
with torch's own BatchNorm. Run under kolorun (any -np)."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import check, done, randn  # noqa: E402

import kolo.torch as hvd  # noqa: E402
from kolo.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
BATCH = {1: [6], 2: [3, 5], 3: [4, 0, 6]}[N]  # samples per rank, uneven
C = 3
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def close(a, b, dtype):
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=TOL[dtype], atol=TOL[dtype]))


def reference(tail, dtype, momentum):
    return (torch.nn.BatchNorm2d if tail else torch.nn.BatchNorm1d)(C, momentum=momentum).to(dtype)


def run_case(tail, dtype, momentum):
    name = f"{dtype} shape (n, {C}{''.join(', ' + str(t) for t in tail)}) momentum {momentum}"
    g = torch.Generator().manual_seed(11)
    weight, bias = randn(C, generator=g, dtype=dtype), randn(C, generator=g, dtype=dtype)
    sbn = SyncBatchNorm(C, momentum=momentum).to(dtype)
    ref = reference(tail, dtype, momentum)
    for m in (sbn, ref):
        with torch.no_grad():
            m.weight.copy_(weight)
            m.bias.copy_(bias)
    first = sum(BATCH[:R])
    for step in range(3):
        total = sum(BATCH)
        # a shifted, scaled batch: the variance formula must not cancel
        X = (randn(total, C, *tail, generator=g, dtype=dtype) * 3 + 5).requires_grad_()
        G = randn(total, C, *tail, generator=g, dtype=dtype)
        x = X.detach()[first:first + BATCH[R]].clone().requires_grad_()
        y = sbn(x)
        (y * G[first:first + BATCH[R]]).sum().backward()
        Y = ref(X)
        (Y * G).sum().backward()
        mine = slice(first, first + BATCH[R])
        check(close(y, Y.detach()[mine], dtype), f"forward {name} step {step}")
        check(close(x.grad, X.grad[mine], dtype), f"input gradient {name} step {step}")
        grads = torch.cat([sbn.weight.grad, sbn.bias.grad]).to(torch.float64)
        summed = hvd.allreduce(grads, op=hvd.Sum)
        want = torch.cat([ref.weight.grad, ref.bias.grad]).to(torch.float64)
        check(close(summed, want, torch.float64 if dtype == torch.float64 else torch.float32),
              f"weight/bias gradients summed over ranks {name} step {step}: {summed} vs {want}")
        check(close(sbn.running_mean, ref.running_mean, dtype) and close(sbn.running_var, ref.running_var, dtype),
              f"running statistics {name} step {step}")
        check(int(sbn.num_batches_tracked) == step + 1, "num_batches_tracked")
        for m in (sbn, ref):
            m.zero_grad()
    sbn.eval()
    ref.eval()
    x = randn(4, C, *tail, generator=g, dtype=dtype)
    check(close(sbn(x), ref(x), dtype), f"eval mode {name}")


for dtype in (torch.float64, torch.float32):
    for tail in ((), (4, 5)):
        for momentum in (0.1, None):
            run_case(tail, dtype, momentum)

# the layer inside a model trained with DistributedOptimizer, as in Horovod's examples
model = torch.nn.Sequential(torch.nn.Linear(4, C), SyncBatchNorm(C), torch.nn.ReLU(), torch.nn.Linear(C, 1))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for step in range(3):
    opt.zero_grad()
    x = randn(BATCH[R], 4, generator=torch.Generator().manual_seed(step * 10 + R))
    F.mse_loss(model(x), torch.zeros(BATCH[R], 1), reduction="sum").backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
check(torch.equal(hvd.broadcast(flat, 0), flat), "replicas stay equal after training with SyncBatchNorm")
try:
    SyncBatchNorm(C)(torch.ones(C))
    check(False, "1-D input accepted")
except ValueError as e:
    check("expected at least 2D input" in str(e), str(e))
done(f"sync_batch_norm rank {R} of {N}")
