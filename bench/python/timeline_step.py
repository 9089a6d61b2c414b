#!/usr/bin/env python3
"""Rank side of bench/timeline_cost.sh: STEPS training steps of the MLP of
anchor_models.py (784-4096-4096-10, batch 64 per rank, synthetic data) through
kolo.torch's DistributedOptimizer; prints rank 0's median step time. Under
KOLO_TIMELINE the timeline records every step's buckets and marks.

  kolorun -np 2 python3 bench/python/timeline_step.py STEPS"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kolo.torch as hvd  # noqa: E402
from anchor_models import model  # noqa: E402

steps = int(sys.argv[1])
hvd.init()
torch.set_num_threads(1)
torch.manual_seed(hvd.rank())
net = model("mlp")
opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.01),
                               named_parameters=net.named_parameters())
hvd.broadcast_parameters(net.state_dict(), root_rank=0)
x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
times = []
for i in range(steps + 3):  # 3 warm-up steps
    t0 = time.perf_counter()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    if i >= 3:
        times.append(time.perf_counter() - t0)
if hvd.rank() == 0:
    print(f"step_ms={statistics.median(times) * 1e3:.3f}")
hvd.shutdown()
