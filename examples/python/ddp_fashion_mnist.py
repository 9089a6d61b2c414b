"""PyTorch's DDP tutorial program on kolo: the backend name is the only change.

  kolorun -np 2 /usr/bin/python3 examples/python/ddp_fashion_mnist.py

Also under mpirun or srun (no MASTER_* variables needed), or with
torchrun-style MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE. The classic tutorial
network (conv 5x5 16 - BN - ReLU - max-pool, conv 5x5 32 - BN - ReLU -
max-pool, a linear layer to 10 classes) trains on Fashion-MNIST
(examples/python/fashion_mnist_data.py); a DistributedSampler gives every
rank its shard, DistributedDataParallel averages the gradients through the
"kolo" process group, rank 0 draws a progress bar, and the test accuracy is
counted over all ranks' test shards at the end. Where torch sees a GPU each rank
trains on the one of its local index (DDP with device_ids; --device). --backend
gloo runs the same program on PyTorch's Gloo (start it with MASTER_* variables).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from fashion_mnist_data import DEFAULT_DIR, dataset

try:
    import kolo.torch  # noqa: F401  registers the backend "kolo"
except ImportError:  # not pip-installed: use the checkout's build (scripts/build.sh)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    os.environ.get("KOLO_BUILD_DIR", "build"), "python"))
    import kolo.torch  # noqa: F401


class ConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(1, 16, kernel_size=5, stride=1, padding=2),
                                    nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(kernel_size=2, stride=2))
        self.layer2 = nn.Sequential(nn.Conv2d(16, 32, kernel_size=5, stride=1, padding=2),
                                    nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(kernel_size=2, stride=2))
        self.fc = nn.Linear(7 * 7 * 32, num_classes)

    def forward(self, x):
        return self.fc(self.layer2(self.layer1(x)).reshape(x.size(0), -1))


def parse_args():
    p = argparse.ArgumentParser(description="DDP on kolo: the PyTorch tutorial network on Fashion-MNIST")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--backend", default="kolo")
    p.add_argument("--data-dir", default=DEFAULT_DIR)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--limit", type=int, default=0, help="train on the first N images only (smoke runs)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: the GPU of this rank's local index when torch sees one, else the CPU")
    return p.parse_args()


def pick_device(choice, rank):
    """The GPU of this rank's index on its host (the launcher's LOCAL_RANK, or
    Open MPI's, MPICH's, Slurm's), shared round-robin when there are fewer, or the CPU."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit(f"rank {rank}: --device cuda, but torch sees no GPU")
    local = next((int(os.environ[v]) for v in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                               "SLURM_LOCALID") if v in os.environ), rank)
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def progress(epoch, epochs, done, total, loss, rate):
    width = 24
    filled = width * done // total
    print(f"epoch {epoch}/{epochs} {'█' * filled}{'░' * (width - filled)} {100 * done // total:3d}% "
          f"loss {loss:.3f}  {rate:,.0f} samples/s", flush=True)


def evaluate(model, test_set, rank, world):
    """Every rank counts its shard of the test set; one allreduce adds the counts."""
    sampler = DistributedSampler(test_set, num_replicas=world, rank=rank, shuffle=False)
    device = next(model.parameters()).device
    counts = torch.zeros(2, dtype=torch.int64, device=device)  # correct, seen
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(test_set, batch_size=1000, sampler=sampler):
            x, y = x.to(device), y.to(device)
            counts += torch.tensor([model(x).argmax(1).eq(y).sum().item(), len(y)], device=device)
    dist.all_reduce(counts)
    return counts[0].item() / counts[1].item()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    train_set, test_set = dataset(args.data_dir, "train"), dataset(args.data_dir, "t10k")
    if args.limit:
        train_set = torch.utils.data.Subset(train_set, range(min(args.limit, len(train_set))))

    device = pick_device(args.device, rank)
    torch.manual_seed(0)
    # broadcasts rank 0's parameters
    model = DistributedDataParallel(ConvNet().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    if rank == 0:
        print(f"{world} ranks on backend {dist.get_backend()}, {device.type}, batch {args.batch_size} per rank",
              flush=True)
    for epoch in range(1, args.epochs + 1):
        model.train()
        sampler.set_epoch(epoch)
        start, steps = time.time(), len(loader)
        marks = {max(1, steps * k // 10) for k in range(1, 11)}
        for i, (x, y) in enumerate(loader, 1):
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0 and i in marks:
                progress(epoch, args.epochs, i, steps, loss.item(),
                         i * args.batch_size * world / (time.time() - start))
    accuracy = evaluate(model, test_set, rank, world)
    if rank == 0:
        print(f"test accuracy {100 * accuracy:.2f}%", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
