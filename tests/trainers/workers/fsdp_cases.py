"""The FSDP configurations that test_fsdp.py trains on backend "kolo" and on
"gloo" (workers/fsdp_train.py), with the model and data they share.

Every case trains the same small ConvNet from the same seed on the same data
(rank r's batches depend on the step and r only), so a kolo run and a gloo
run differ only in the backend that moves the shards and gradients.

Shapes are chosen so that FSDP has to pad: fc1's 15 output rows and fc2's 3
split unevenly over 2 ranks (FSDP2 shards dim 0 with torch.chunk; the
classic wrapper pads its flat parameter), and no dimension is 1, so every
parameter has a proper shard on each of 2 ranks.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 6
BATCH = 8
LR = 0.1

# name -> options; api 2: FSDP2 fully_shard, api 1: FullyShardedDataParallel.
#   clip       clip_grad_norm_ every step (an allreduce of the norm's parts)
#   accum      two micro-batches per step, the first without gradient sync
#              (FSDP2 set_requires_gradient_sync(False), FSDP1 no_sync())
#   options    FSDP2: reshard_after_forward=False on fc1, explicit forward and
#              backward prefetch, an async root unshard before the first step
#   bf16       FSDP2 MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32),
#              FSDP1 MixedPrecision(the same dtypes)
#   divide     FSDP2 set_gradient_divide_factor(2 x ranks): a reduce-scatter
#              with ReduceOp.PREMUL_SUM(1 / factor), which gloo refuses
#              ("Cannot use ReduceOp.PREMUL_SUM with Gloo"); gloo's run of this
#              case is the same training written as gloo can run it: the
#              default average with half the learning rate (SGD is linear in
#              the gradient, and halving is exact in floating point)
#   orig       FSDP1 use_orig_params=True with ShardingStrategy.SHARD_GRAD_OP
CASES = {
    "fsdp2": dict(api=2, clip=True),
    "fsdp2_options": dict(api=2, options=True, accum=True),
    "fsdp2_bf16": dict(api=2, bf16=True),
    "fsdp2_divide": dict(api=2, divide=True),
    "fsdp1": dict(api=1, clip=True),
    "fsdp1_orig": dict(api=1, orig=True, accum=True),
    "fsdp1_bf16": dict(api=1, bf16=True),
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)      # 8x8 -> 6x6
        self.fc1 = nn.Linear(4 * 6 * 6, 15)
        self.fc2 = nn.Linear(15, 3)

    def forward(self, x):
        x = torch.flatten(F.relu(self.conv(x)), 1)
        return self.fc2(F.relu(self.fc1(x)))


def new_model():
    torch.manual_seed(0)
    return Net()


def batch(step, rank, micro=0):
    """Rank rank's batch at (step, micro-batch): the same on every backend."""
    g = torch.Generator().manual_seed(1009 * step + 31 * micro + rank)
    return torch.randn(BATCH, 1, 8, 8, generator=g), torch.randint(0, 3, (BATCH,), generator=g)
