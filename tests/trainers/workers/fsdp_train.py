"""Rank program of test_fsdp.py: trains the cases of fsdp_cases.py with FSDP on
the default group of BACKEND and saves, per case and rank, what the test
compares between backends.

  kolorun -np 2 python fsdp_train.py BACKEND CASE[,CASE...] OUTDIR

OUTDIR/CASE.BACKEND.rankR.pt holds a dict:
  backend      dist.get_backend() (the test checks the run used the backend it names)
  losses       this rank's loss at every step
  norms        cases with clip: the gradient norm clip_grad_norm_ found at every step
  shards       parameter name -> this rank's local data after training:
               FSDP2 (DTensor) its local shard; FSDP1 the flat parameter's
               shard (use_orig_params=False) or the original parameter's
               part of it (use_orig_params=True, a 1-D view)
  shard_dims   FSDP2: parameter name -> the dimension it is sharded on
  grad_shapes  parameter name -> (local gradient shape, local parameter shape)
               after the last backward: both are the shard's, not the full ones
  ops          kolo only: the collectives FSDP issued on kolo's groups, by
               kind, reduce op and dtype (gloo's group is C++: nothing to count)
  initial, final (rank 0): the full state dict before training and after
               (torch.distributed.checkpoint's get_model_state_dict,
               full_state_dict=True, cpu_offload=True)
"""
import collections
import functools
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy, ShardingStrategy, fully_shard
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.tensor import DTensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp_cases import CASES, LR, STEPS, batch, new_model  # noqa: E402

import kolo.torch  # noqa: E402,F401  (registers "kolo"; its env:// also starts gloo under kolorun)

BACKEND, NAMES, OUT = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
OPS = collections.Counter()

_KINDS = {
    "all_gather": ("allgather", "all_gather_single", "_allgather_base", "all_gather_single_coalesced",
                   "allgather_into_tensor_coalesced"),
    "reduce_scatter": ("reduce_scatter", "reduce_scatter_single", "_reduce_scatter_base",
                       "reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced"),
    "allreduce": ("allreduce", "allreduce_coalesced"),
}


def _first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)):
        for item in x:
            t = _first_tensor(item)
            if t is not None:
                return t
    return None


def _counting(kind, fn):
    @functools.wraps(fn)
    def counted(self, *args, **kwargs):
        label = kind
        op = getattr(kwargs.get("opts", args[-1] if args else None), "reduceOp", None)
        if op is not None:
            label += "/" + getattr(getattr(op, "op", op), "name", str(op))
        t = _first_tensor(args)
        if t is not None:
            label += "/" + str(t.dtype).replace("torch.", "")
        OPS[label] += 1
        return fn(self, *args, **kwargs)
    return counted


def count_kolo_collectives():
    """Wraps the ops of kolo's group class: every kolo group FSDP uses (the
    default one and any its device mesh makes) counts into OPS."""
    from kolo.torch.process_group import ProcessGroupKolo
    for kind, names in _KINDS.items():
        for name in names:
            setattr(ProcessGroupKolo, name, _counting(kind, getattr(ProcessGroupKolo, name)))


def wrap(model, case):
    """The case's FSDP around model; returns (model, learning rate)."""
    lr = LR
    if case["api"] == 2:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if case.get("bf16") else MixedPrecisionPolicy()
        for layer in (model.conv, model.fc1, model.fc2):
            keep = case.get("options") and layer is model.fc1
            fully_shard(layer, mp_policy=mp, reshard_after_forward=not keep)
        fully_shard(model, mp_policy=mp)
        if case.get("options"):
            model.conv.set_modules_to_forward_prefetch([model.fc1])
            model.fc1.set_modules_to_forward_prefetch([model.fc2])
            model.fc2.set_modules_to_backward_prefetch([model.fc1])
            model.fc1.set_modules_to_backward_prefetch([model.conv])
            model.conv.unshard(async_op=True)  # FSDP waits for it in conv's pre-forward
        if case.get("divide"):
            if BACKEND == "gloo":
                lr = LR / 2  # the same update as average / 2 (see fsdp_cases.py)
            else:
                for layer in (model.conv, model.fc1, model.fc2):
                    layer.set_gradient_divide_factor(2.0 * dist.get_world_size())
        return model, lr
    kw = dict(auto_wrap_policy=ModuleWrapPolicy({nn.Conv2d, nn.Linear}), device_id=torch.device("cpu"))
    if case.get("orig"):
        kw.update(use_orig_params=True, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP)
    if case.get("bf16"):
        kw["mixed_precision"] = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return FSDP(model, **kw), lr


def local(t):
    return t.to_local() if isinstance(t, DTensor) else t


def backward_without_sync(model, case, loss_fn):
    if case["api"] == 2:
        model.set_requires_gradient_sync(False)
        loss_fn().backward()
        model.set_requires_gradient_sync(True)
    else:
        with model.no_sync():
            loss_fn().backward()


def train(name):
    case = CASES[name]
    rank = dist.get_rank()
    model = new_model()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    model, lr = wrap(model, case)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    OPS.clear()
    losses, norms, grad_shapes = [], [], {}
    for step in range(STEPS):
        def loss_of(micro):
            x, y = batch(step, rank, micro)
            return F.cross_entropy(model(x), y)
        if case.get("accum"):
            backward_without_sync(model, case, lambda: loss_of(1))
        loss = loss_of(0)
        loss.backward()
        if step == STEPS - 1:
            # None: no gradient (FSDP1 use_orig_params=True gives none to a
            # parameter with no elements in this rank's shard).
            grad_shapes = {n: (None if p.grad is None else tuple(local(p.grad).shape), tuple(local(p).shape))
                           for n, p in model.named_parameters()}
        if case.get("clip"):
            # 0.1 is below the gradients' norm (the test checks): the norm's
            # allreduce over the shards decides every update.
            if case["api"] == 2:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            else:
                norm = model.clip_grad_norm_(0.1)
            norms.append(local(norm).item())
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    ops = dict(OPS)
    record = dict(backend=dist.get_backend(), losses=losses, norms=norms, grad_shapes=grad_shapes, ops=ops,
                  shards={n: local(p).detach().clone() for n, p in model.named_parameters()},
                  shard_dims={n: p.placements[0].dim for n, p in model.named_parameters()
                              if isinstance(p, DTensor)})
    final = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        record.update(initial=initial, final=final)
    torch.save(record, os.path.join(OUT, f"{name}.{BACKEND}.rank{rank}.pt"))


def main():
    dist.init_process_group(BACKEND)
    if BACKEND == "kolo":
        count_kolo_collectives()
    for name in NAMES:
        train(name)
    dist.destroy_process_group()
    print(f"fsdp_train: {BACKEND} rank done: {','.join(NAMES)}", flush=True)


if __name__ == "__main__":
    main()
