"""One DDP training step on CUDA: a ResNet-18-sized CNN (ResNet-18's layers,
11.2 M parameters, 32x32 inputs, 10 classes) on synthetic data, DDP over the
"kolo" backend or torch's gloo, the same model, data and step on both.

  kolorun -np 2 python bench/gpu/ddp_step.py --backend kolo --out kolo.json
  kolorun -np 2 python bench/gpu/ddp_step.py --backend gloo --out gloo.json

(kolorun sets torchrun's variables, so gloo runs under it too.) Each rank
trains on its GPU (local rank modulo the GPUs: ranks share one GPU where
there is one) with SGD; `--warmup` steps, then `--steps` timed steps, each
ended by torch.cuda.synchronize(); the median step is the figure. After the
timed steps the ranks' parameters are compared (they must be equal: DDP keeps
them so). --device cpu runs the same on the CPU (a rehearsal). Rank 0 writes
{"backend", "ranks", "device", "params", "batch", "step_ms", "steps_ms"}.
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.skip(x))


class ResNet18(nn.Module):
    """ResNet-18's stages (2 blocks each of 64, 128, 256, 512 channels), with
    the CIFAR stem (3x3 convolution, no pooling) for 32x32 inputs."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["kolo", "gloo"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    if a.backend == "kolo":
        import kolo.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    local = int(__import__("os").environ.get("LOCAL_RANK", rank))
    if a.device == "cuda":
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        sync = torch.cuda.synchronize
    else:
        dev = torch.device("cpu")
        sync = lambda: None  # noqa: E731
    torch.manual_seed(0)  # the same initial model on every rank (DDP broadcasts rank 0's anyway)
    model = ResNet18().to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device="cpu").manual_seed(1000 + rank)
    x = torch.randn(a.batch, 3, 32, 32, generator=g).to(dev)
    y = torch.randint(0, 10, (a.batch,), generator=g).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    # DDP keeps the replicas equal: a step whose gradients were not averaged
    # across ranks (different data per rank) would leave them apart.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(n)]
    dist.all_gather(gathered, flat)
    for r, other in enumerate(gathered):
        if not torch.equal(other, flat):
            raise SystemExit(f"{a.backend}: rank {r}'s parameters differ from rank {rank}'s after training")
    params = sum(p.numel() for p in model.parameters())
    med = statistics.median(times) * 1e3
    if rank == 0:
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        print(f"ddp step {a.backend} n={n} {name}: {params / 1e6:.1f} M parameters, batch {a.batch}/rank, "
              f"median {med:.1f} ms", flush=True)
        with open(a.out, "w") as f:
            json.dump({"backend": a.backend, "ranks": n, "device": name, "params": params, "batch": a.batch,
                       "step_ms": med, "steps_ms": [t * 1e3 for t in times]}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
