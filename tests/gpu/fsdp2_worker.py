"""FSDP2 (fully_shard) on the "kolo" backend, rank side, on CUDA tensors
(issue 31: "FSDP2 on CUDA"): an MLP sharded over the ranks trains 5 steps,
each rank on its own batch; every rank also trains an unsharded copy on the
concatenation of all ranks' batches (one process with the whole batch). The
gathered parameters must equal the copy's (fp32 tolerance).

  kolorun -np 2 python tests/gpu/fsdp2_worker.py          # the GPU of each local rank
  KOLO_TEST_DEVICE=cpu kolorun -np 2 python ...           # the same on the CPU (rehearsal)

Needs torch >= 2.6 (torch.distributed.fsdp.fully_shard); exits 77 without a
GPU when asked for CUDA.
"""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import kolo.torch  # noqa: F401  (registers "kolo")

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:
    print(f"skipped: torch {torch.__version__} has no torch.distributed.fsdp.fully_shard")
    sys.exit(77)

DEVICE = os.environ.get("KOLO_TEST_DEVICE", "cuda")
if DEVICE == "cuda" and not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)
STEPS, BATCH, TOL = 5, 16, 1e-5

dist.init_process_group("kolo")
R, N = dist.get_rank(), dist.get_world_size()
if DEVICE == "cuda":
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(device)
else:
    device = torch.device("cpu")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to(device)
whole = copy.deepcopy(model)  # the one-process reference
initial = [q.detach().clone() for q in whole.parameters()]
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(whole.parameters(), lr=0.1)


def batch(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(BATCH, 32, generator=g).to(device), torch.randn(BATCH, 8, generator=g).to(device)


for step in range(STEPS):
    x, y = batch(step, R)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()  # FSDP2 averages the gradients over the ranks
    opt.step()
    xs, ys = zip(*(batch(step, r) for r in range(N)))
    ref_opt.zero_grad()
    F.mse_loss(whole(torch.cat(xs)), torch.cat(ys)).backward()
    ref_opt.step()

worst = 0.0
for (name, p), q in zip(model.named_parameters(), whole.parameters()):
    full = p.full_tensor() if hasattr(p, "full_tensor") else p
    worst = max(worst, (full.detach().double() - q.detach().double()).abs().max().item())
moved = max((q.detach() - q0).abs().max().item() for q, q0 in zip(whole.parameters(), initial))
ok = worst <= TOL and moved > 1e-3  # and training moved the weights: equal but unmoved proves nothing
print(f"fsdp2 on {device}: {N} ranks, {STEPS} steps, largest difference from one process "
      f"with the whole batch {worst:.2e} (tolerance {TOL:g}), weights moved {moved:.2e}: "
      f"{'ok' if ok else 'FAILED'}", flush=True)
dist.destroy_process_group()
sys.exit(0 if ok else 1)
