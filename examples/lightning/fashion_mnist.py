"""PyTorch Lightning on kolo: Fashion-MNIST with Trainer(strategy="ddp_kolo").

  python examples/lightning/fashion_mnist.py             # Lightning starts the 2 ranks
  kolorun -np 2 python examples/lightning/fashion_mnist.py
  srun -N 2 --ntasks-per-node=2 python examples/lightning/fashion_mnist.py --num-nodes 2

The LightningModule is the classic tutorial ConvNet of examples/python/ddp_fashion_mnist.py
on the same data (Debian's dataset-fashion-mnist, examples/python/fashion_mnist_data.py).
``import kolo.lightning`` registers the strategy name "ddp_kolo": Lightning's DDP on the
torch.distributed backend "kolo". Lightning draws the progress bar and shards the data; after
training, Trainer.test reports the test accuracy over all ranks. --backend gloo runs the same
job on DDPStrategy(process_group_backend="gloo") for comparison.
"""
import argparse
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F
import pytorch_lightning as pl
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from ddp_fashion_mnist import ConvNet  # noqa: E402  (also makes kolo importable from a build tree)
from fashion_mnist_data import DEFAULT_DIR, dataset  # noqa: E402

import kolo.lightning  # noqa: E402,F401  registers "ddp_kolo"


class FashionMNIST(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr
        self.net = ConvNet()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss, prog_bar=True)  # this rank's, on the bar: no collective per step
        return loss

    def test_step(self, batch, batch_idx):
        x, y = batch
        # Means weighted by batch size, then over ranks (sync_dist): the whole test set's.
        self.log("test_acc", self(x).argmax(1).eq(y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch Lightning on kolo: Fashion-MNIST")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--devices", type=int, default=2, help="ranks per host")
    p.add_argument("--accelerator", choices=["auto", "cpu", "gpu"], default="auto",
                   help="auto: gpu where this host has a GPU for each of --devices ranks, else cpu")
    p.add_argument("--num-nodes", type=int, default=1)
    p.add_argument("--backend", choices=["kolo", "gloo"], default="kolo")
    p.add_argument("--data-dir", default=DEFAULT_DIR)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--limit", type=int, default=0, help="train on the first N images only (smoke runs)")
    p.add_argument("--out", default="lightning_fashion_mnist", help="checkpoints go to OUT/checkpoints")
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    # The data is in memory: loader worker processes would only copy it.
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    pl.seed_everything(0, verbose=False)
    train_set, test_set = dataset(args.data_dir, "train"), dataset(args.data_dir, "t10k")
    if args.limit:
        train_set = torch.utils.data.Subset(train_set, range(min(args.limit, len(train_set))))
    # Under kolorun the gloo run needs nothing either: kolorun sets torchrun's
    # variables, so Lightning takes its ranks as under torchrun.
    strategy = "ddp_kolo" if args.backend == "kolo" else DDPStrategy(process_group_backend="gloo")
    # Lightning's gpu accelerator gives each rank of a host its own GPU.
    accelerator = args.accelerator
    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.device_count() >= args.devices else "cpu"
    trainer = pl.Trainer(accelerator=accelerator, devices=args.devices, num_nodes=args.num_nodes, strategy=strategy,
                         max_epochs=args.epochs, logger=False, default_root_dir=args.out,
                         enable_model_summary=False)
    model = FashionMNIST(args.lr)
    start = time.time()
    # Lightning gives each rank a shuffled DistributedSampler over these.
    trainer.fit(model, DataLoader(train_set, batch_size=args.batch_size, shuffle=True))
    trained = time.time() - start
    (result,) = trainer.test(model, DataLoader(test_set, batch_size=1000), verbose=False)
    if trainer.is_global_zero:
        print(f"{trainer.world_size} ranks on backend {torch.distributed.get_backend()}: "
              f"{args.epochs} epoch(s) in {trained:.1f} s, test accuracy {100 * result['test_acc']:.2f}%",
              flush=True)


if __name__ == "__main__":
    main()
