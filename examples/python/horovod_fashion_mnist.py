"""Horovod's PyTorch MNIST program on kolo: the import line is the only change.

  kolorun -np 2 /usr/bin/python3 examples/python/horovod_fashion_mnist.py

Fashion-MNIST from Debian's dataset-fashion-mnist (/usr/share/datasets/
fashion-mnist, gzipped IDX files read with numpy; --data-dir overrides).
The Horovod shape: hvd.init(), each rank on the GPU of its local rank when
there is one (--device), the learning rate scaled by hvd.size(),
parameters and optimizer state broadcast from rank 0, a DistributedSampler
shard per rank, hvd.DistributedOptimizer, metrics averaged with
hvd.allreduce, the checkpoint written by rank 0 only, a progress bar on rank 0.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data

try:
    import kolo.torch as hvd  # was: import horovod.torch as hvd
except ImportError:  # not pip-installed: use the checkout's build (scripts/build.sh)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    os.environ.get("KOLO_BUILD_DIR", "build"), "python"))
    import kolo.torch as hvd


def common_args(description):
    """The options this example shares with elastic_fashion_mnist.py."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch-size", type=int, default=64, help="input batch size per rank")
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.025, help="learning rate of one rank")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--limit", type=int, default=0, help="use only the first N training images (smoke tests)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: the GPU of this rank's local index when torch sees one, else the CPU")
    return p


def parse_args():
    p = common_args("kolo (Horovod API) Fashion-MNIST example")
    p.add_argument("--fp16-allreduce", action="store_true", help="fp16 compression on the wire")
    p.add_argument("--gradient-predivide-factor", type=float, default=1.0)
    p.add_argument("--checkpoint", default="horovod_fashion_mnist.pt")
    return p.parse_args()


def read_idx(path, magic, header):
    """An IDX file's payload as uint8 (a clear error naming a missing or bad file)."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        sys.exit(f"rank {hvd.rank()}: cannot read {path}: {e} (install dataset-fashion-mnist "
                 "or pass --data-dir)")
    if len(raw) < header or int.from_bytes(raw[:4], "big") != magic:
        sys.exit(f"rank {hvd.rank()}: {path} is not an IDX file (magic {raw[:4].hex()})")
    return np.frombuffer(raw, dtype=np.uint8, offset=header)


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 2051, 16)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 2049, 8)
    x = torch.from_numpy(images.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0)
    x = (x - 0.2860) / 0.3530  # Fashion-MNIST's mean and standard deviation
    return torch.utils.data.TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    """Horovod's MNIST network, wider (32 and 64 filters, 128 hidden units) and
    with lighter dropout, which Fashion-MNIST needs to pass 85 % in one epoch."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=5)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=5)
        self.fc1 = nn.Linear(1024, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 1024)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, p=0.25, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def metric_average(val, name):
    return hvd.allreduce(torch.tensor(val), name=name).item()


def progress(epoch, epochs, done, total, loss, rate):
    width = 24
    filled = int(width * done / total)
    print(f"epoch {epoch}/{epochs} {'█' * filled}{'░' * (width - filled)} {100 * done // total:3d}% "
          f"loss {loss:.3f}  {rate:,.0f} samples/s", flush=True)


def train(epoch, args, model, optimizer, loader, sampler):
    device = next(model.parameters()).device
    model.train()
    sampler.set_epoch(epoch)  # a different shard order every epoch
    steps, start, seen = len(loader), time.time(), 0
    marks = {max(1, steps * k // 10) for k in range(1, 11)}
    for i, (data, target) in enumerate(loader, 1):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        seen += len(data)
        if hvd.rank() == 0 and i in marks:
            progress(epoch, args.epochs, i, steps, loss.item(), seen * hvd.size() / (time.time() - start))


def test(model, loader, sampler):
    device = next(model.parameters()).device
    model.eval()
    test_loss, correct = 0.0, 0.0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    # each rank holds a shard of the test set: average the per-shard means
    test_loss = metric_average(test_loss / len(sampler), "avg_loss")
    accuracy = metric_average(correct / len(sampler), "avg_accuracy")
    if hvd.rank() == 0:
        print(f"test set: average loss {test_loss:.4f}, accuracy {100 * accuracy:.2f}%", flush=True)
    return accuracy


def save_checkpoint(path, model, optimizer, epoch):
    """Rank 0 only; written to a temporary file and renamed, so never half a file."""
    tmp = path + ".tmp"
    torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)


def pick_device(choice):
    """Horovod's pinning, torch.cuda.set_device(hvd.local_rank()): the GPU of
    this rank's local index (ranks share GPUs round-robin when there are
    fewer), or the CPU."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit(f"rank {hvd.rank()}: --device cuda, but torch sees no GPU")
    device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def start(args):
    """hvd.init(), the seed and threads, the device, and the (train, test)
    datasets; returns (train_set, test_set, device)."""
    hvd.init()
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    train_set, test_set = load(args.data_dir, "train"), load(args.data_dir, "t10k")
    if args.limit:
        train_set = torch.utils.data.Subset(train_set, range(min(args.limit, len(train_set))))
    return train_set, test_set, device


def main():
    args = parse_args()
    train_set, test_set, device = start(args)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size,
                                               sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net().to(device)
    # the learning rate grows with the number of ranks (the global batch grows too)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)
    if hvd.rank() == 0:
        print(f"{hvd.size()} ranks on {device.type}, batch {args.batch_size} per rank, "
              f"lr {args.lr * hvd.size()}", flush=True)
    for epoch in range(1, args.epochs + 1):
        train(epoch, args, model, optimizer, train_loader, train_sampler)
        test(model, test_loader, test_sampler)
        if hvd.rank() == 0:
            save_checkpoint(args.checkpoint, model, optimizer, epoch)


if __name__ == "__main__":
    main()
