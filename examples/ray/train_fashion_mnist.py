"""Ray Train on kolo: a TorchTrainer whose workers talk through kolo's "kolo" backend.

  python examples/ray/train_fashion_mnist.py                      # a local Ray, 2 workers
  python examples/ray/train_fashion_mnist.py --address HOST:PORT  # a running cluster
  python examples/ray/train_fashion_mnist.py --cache fmnist-train.kcache   # augmented cache

The only kolo line is ``torch_config=KoloConfig()``; the rest is Ray's usual
PyTorch recipe: prepare_model wraps the network in DDP (gradients averaged
by kolo), prepare_data_loader gives every worker its shard, and rank 0
reports the test accuracy with a checkpoint of the model. The network is the
PyTorch tutorial ConvNet of examples/python/ddp_fashion_mnist.py; the data are
the Fashion-MNIST IDX files (examples/python/fashion_mnist_data.py) or a kolo
cache built by fashion_mnist_preprocess or preprocess_fashion_mnist.py.
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import fashion_mnist_data  # noqa: E402  (the IDX reader the other examples use)

try:
    import kolo
except ImportError:  # not installed: the checkout's build (scripts/build.sh)
    sys.path.insert(0, os.path.join(HERE, "..", "..", os.environ.get("KOLO_BUILD_DIR", "build"), "python"))
    import kolo
from kolo.ray import KoloConfig  # noqa: E402

import ray  # noqa: E402
import ray.train  # noqa: E402
import torch  # noqa: E402
from ray.train import Checkpoint, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchTrainer  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description="Ray Train on kolo: Fashion-MNIST with a TorchTrainer")
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--data-dir", default=fashion_mnist_data.DEFAULT_DIR)
    p.add_argument("--cache", help="train from this kolo cache (augmented) instead of the IDX files")
    p.add_argument("--limit", type=int, default=0, help="train on the first N samples only (smoke runs)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    p.add_argument("--use-gpu", choices=["auto", "yes", "no"], default="auto",
                   help="a GPU per worker (Ray places the model and batches on it); auto: yes where this "
                        "machine has one for each worker")
    p.add_argument("--address", default=None, help="Ray cluster (default: RAY_ADDRESS, else a local one)")
    p.add_argument("--storage-path", default=None, help="where Ray keeps the run and its checkpoint "
                   "(default: a temporary directory)")
    return p.parse_args()


def conv_net():
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(7 * 7 * 32, 10))


def train_set(config):
    import torch
    if not config["cache"]:
        data = fashion_mnist_data.dataset(config["data_dir"], "train")
    else:
        from kolo.data_cache import Cache
        cache = Cache(config["cache"])  # memory-mapped: the workers of a node share its pages
        if cache.spec.dtype != "f32" or cache.spec.shape != (1, 28, 28):
            raise ValueError(f"{config['cache']}: records {cache.spec.describe()}, expected [1, 28, 28] f32")
        records, labels = cache.records(), torch.from_numpy(cache.labels())

        class CacheDataset(torch.utils.data.Dataset):
            def __len__(self):
                return len(labels)

            def __getitem__(self, i):
                return torch.from_numpy(records[i].copy()), labels[i]
        data = CacheDataset()
    if config["limit"]:
        data = torch.utils.data.Subset(data, range(min(config["limit"], len(data))))
    return data


def train_func(config):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.utils.data import DataLoader
    from ray.train.torch import prepare_data_loader, prepare_model

    torch.set_num_threads(config["threads"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(0)
    model = prepare_model(conv_net())  # DDP over the "kolo" process group
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    loader = prepare_data_loader(DataLoader(train_set(config), batch_size=config["batch_size"], shuffle=True))
    test = prepare_data_loader(DataLoader(fashion_mnist_data.dataset(config["data_dir"], "t10k"), batch_size=1000))
    if rank == 0:
        print(f"{world} workers on backend {dist.get_backend()}, batch {config['batch_size']} per worker, "
              f"{len(loader)} steps per epoch", flush=True)
    for epoch in range(1, config["epochs"] + 1):
        if world > 1:
            loader.sampler.set_epoch(epoch)
        model.train()
        start = time.time()
        for step, (x, y) in enumerate(loader, 1):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0 and step % max(1, len(loader) // 10) == 0:
                print(f"epoch {epoch} step {step}/{len(loader)} loss {loss.item():.3f} "
                      f"{step * config['batch_size'] * world / (time.time() - start):,.0f} samples/s", flush=True)
        # Every worker counts its shard of the test set; one allreduce adds the counts.
        counts = torch.zeros(2, dtype=torch.int64)
        model.eval()
        with torch.no_grad():
            for x, y in test:
                counts += torch.tensor([model(x).argmax(1).eq(y).sum().item(), len(y)])
        dist.all_reduce(counts)
        metrics = {"epoch": epoch, "test_accuracy": counts[0].item() / counts[1].item(),
                   "epoch_seconds": time.time() - start}
        if rank == 0:
            print(f"epoch {epoch}: test accuracy {100 * metrics['test_accuracy']:.2f}%", flush=True)
            with tempfile.TemporaryDirectory() as d:
                torch.save(model.module.state_dict() if world > 1 else model.state_dict(),
                           os.path.join(d, "model.pt"))
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            ray.train.report(metrics)


def main():
    a = parse_args()
    config = {k: getattr(a, k) for k in ("epochs", "batch_size", "lr", "limit", "threads")}
    config.update(data_dir=os.path.abspath(a.data_dir), cache=a.cache and os.path.abspath(a.cache))
    storage = a.storage_path or tempfile.mkdtemp(prefix="kolo-ray-train-")
    use_gpu = a.use_gpu == "yes" or (a.use_gpu == "auto" and torch.cuda.device_count() >= a.num_workers)
    # The workers import fashion_mnist_data (shipped with the job) and kolo
    # (from where this driver found it: the same path on every node).
    kolo_path = os.path.dirname(os.path.dirname(os.path.abspath(kolo.__file__)))
    pythonpath = os.pathsep.join(p for p in (kolo_path, os.environ.get("PYTHONPATH")) if p)
    ray.init(address=a.address, runtime_env={"py_modules": [fashion_mnist_data],
                                             "env_vars": {"PYTHONPATH": pythonpath}})
    start = time.time()
    try:
        result = TorchTrainer(train_func, train_loop_config=config,
                              scaling_config=ScalingConfig(num_workers=a.num_workers, use_gpu=use_gpu),
                              torch_config=KoloConfig(),
                              run_config=RunConfig(name="kolo-fashion-mnist", storage_path=storage)).fit()
    finally:
        ray.shutdown()
    print(f"test accuracy {100 * result.metrics['test_accuracy']:.2f}% after {a.epochs} epoch(s), "
          f"{time.time() - start:.0f} s from the trainer's start; model checkpoint in {result.checkpoint.path}",
          flush=True)


if __name__ == "__main__":
    main()
