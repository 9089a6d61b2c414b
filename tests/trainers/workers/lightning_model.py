"""The small job every Lightning test runs, and its reference computed without Lightning.

A 8-16-1 MLP fits a fixed regression set with SGD + momentum, one batch of
BATCH samples per rank and step, for EPOCHS epochs. Lightning gives each rank
of W a torch DistributedSampler (shuffled, seed PL_GLOBAL_SEED, which
seed_everything(SEED) sets); at step k the ranks' batches together are one
global batch, and DDP's averaged gradient is that of one process on it:
``reference`` trains so in plain torch (no Lightning, no process group), with
the global batches drawn from the same samplers.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import pytorch_lightning as pl
from torch.utils.data.distributed import DistributedSampler

SEED = 0
BATCH = 4          # per rank and step
EPOCHS = 2
TRAIN, VAL, TEST = 64, 16, 32  # samples; divisible by 4 ranks x BATCH: no padding anywhere
LR, MOMENTUM = 0.1, 0.9


def data(n, offset):
    """n samples (x [n, 8], y [n, 1]), a fixed function of their index."""
    g = torch.Generator().manual_seed(1000 + offset)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, :4].sum(1, keepdim=True) - x[:, 4:].prod(1, keepdim=True)).tanh()
    return torch.utils.data.TensorDataset(x, y)


def make_net():
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def rank_value(rank):
    """What rank `rank` logs as "rank_value" (sync_dist mean over W ranks: 1.5 * (W + 1))."""
    return 3.0 * (rank + 1)


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = make_net()  # after seed_everything(SEED): the reference's first weights

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        self.log("rank_value", rank_value(self.global_rank), sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y), sync_dist=True)
        # Summed over steps and ranks: every test sample counted once.
        self.log("test_count", float(len(y)), sync_dist=True, reduce_fx="sum")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)


def loader(dataset):
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=False)


def global_batches(dataset, world, epoch):
    """Per step, the indices all ranks' DistributedSamplers give them together."""
    shards = []
    for r in range(world):
        sampler = DistributedSampler(dataset, num_replicas=world, rank=r, shuffle=True, seed=SEED)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    steps = len(shards[0]) // BATCH
    return [sum((s[k * BATCH:(k + 1) * BATCH] for s in shards), []) for k in range(steps)]


def reference(world):
    """(first state_dict, final state_dict, test MSE) of the same training on one process."""
    torch.manual_seed(SEED)
    net = make_net()
    first = {f"net.{k}": v.clone() for k, v in net.state_dict().items()}
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    train = data(TRAIN, 0)
    x, y = train.tensors
    for epoch in range(EPOCHS):
        for batch in global_batches(train, world, epoch):
            opt.zero_grad()
            F.mse_loss(net(x[batch]), y[batch]).backward()
            opt.step()
    x, y = data(TEST, 2).tensors
    with torch.no_grad():
        return first, {f"net.{k}": v for k, v in net.state_dict().items()}, F.mse_loss(net(x), y).item()
