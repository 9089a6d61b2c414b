"""DDP's options on backend "kolo" against the same DDP on a gloo group of the
same job (rank side). argv[1] is a comma list of cases:

  static          static_graph=True
  bucket_view     gradient_as_bucket_view=True
  unused          find_unused_parameters=True, a layer used only on odd steps
  no_sync         no_sync() accumulating two micro-batches before each sync
  join            join() with uneven inputs: rank r trains 4 + r steps
  fp16_hook       the built-in comm hook fp16_compress_hook
  bf16_hook       bf16_compress_hook
  powersgd        PowerSGD (rank-1 approximation, error feedback, warm start)
  compile         torch.compile of the DDP model (torch >= 2.0; default
                  inductor backend, compiled for the CPU)

For every case each rank trains both groups from the same start on the same
data; parameters must agree within the case's tolerance, and training must
have moved them. kolo and gloo add gradients in different orders, so float32
results differ in the last bits (compressed hooks: in the compressed type).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

sys.path.insert(0, os.path.dirname(__file__))
from common import check, done  # noqa: E402

import kolo.torch  # noqa: E402,F401  (registers the backend)

CASES = sys.argv[1].split(",")
dist.init_process_group("kolo")
R, N = dist.get_rank(), dist.get_world_size()
STEPS = 5
# After 5 SGD steps with momentum: float32 sums in another order differ by
# ~1e-8; fp16/bf16-compressed gradients are rounded once per hop on gloo's
# ring and once in total on kolo, which moves bf16 results by up to ~1e-3.
TOL = {"fp16_hook": 1e-4, "bf16_hook": 3e-3, "compile": 1e-5}


class Net(nn.Module):
    def __init__(self, extra=False):
        super().__init__()
        self.a = nn.Linear(12, 16)
        self.b = nn.Linear(16, 4)
        if extra:  # the "unused" case: used on odd steps only
            self.extra = nn.Linear(16, 16)

    def forward(self, x, use_extra=False):
        h = torch.relu(self.a(x))
        if use_extra:
            h = torch.relu(self.extra(h))
        return self.b(h)


def batch(step, micro=0):
    g = torch.Generator().manual_seed(7919 * step + 31 * micro + R)
    return torch.randn(6 + R, 12, generator=g), torch.randint(0, 4, (6 + R,), generator=g)


def loss_of(model, step, micro=0, use_extra=False):
    x, y = batch(step, micro)
    return F.cross_entropy(model(x, use_extra) if use_extra else model(x), y)


# Every DDP model trained here, kept to the end. torch completes a comm hook's
# future on gloo's worker thread and releases the hook's closure (PowerSGD's
# state, which holds the group) there after the step has gone on; were that the
# last reference, gloo's group would be destroyed on its own thread and join
# itself (std::system_error "Resource deadlock avoided", SIGABRT; seen under
# torch 1.13 at 3 ranks).
KEEP = []


def train(case, group):
    torch.manual_seed(0)
    net = Net(extra=case == "unused")
    # Small buckets: several allreduces per step. Not under torch.compile, whose
    # DDP graph splitting asserts that the first bucket is the smallest.
    kwargs = {"process_group": group} if case == "compile" else {"process_group": group, "bucket_cap_mb": 0.001}
    if case == "static":
        kwargs["static_graph"] = True
    if case == "bucket_view":
        kwargs["gradient_as_bucket_view"] = True
    if case == "unused":
        kwargs["find_unused_parameters"] = True
    model = nn.parallel.DistributedDataParallel(net, **kwargs)
    KEEP.append(model)
    if case == "fp16_hook":
        model.register_comm_hook(group, default_hooks.fp16_compress_hook)
    if case == "bf16_hook":
        model.register_comm_hook(group, default_hooks.bf16_compress_hook)
    if case == "powersgd":
        state = powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=1,
                                       start_powerSGD_iter=2, random_seed=5)
        model.register_comm_hook(state, powersgd.powerSGD_hook)
        KEEP.append(state)
    run = torch.compile(model) if case == "compile" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if case == "join":
        with model.join():
            for step in range(4 + R):
                opt.zero_grad()
                loss_of(run, step).backward()
                opt.step()
        return net
    for step in range(STEPS):
        opt.zero_grad()
        if case == "no_sync":
            with model.no_sync():
                loss_of(run, step, micro=1).backward()
        if case == "unused":
            loss_of(run, step, use_extra=step % 2 == 1).backward()
        else:
            loss_of(run, step).backward()
        opt.step()
    return net


def main():
    gloo = dist.new_group(backend="gloo")
    for case in CASES:
        nets = [train(case, group) for group in (None, gloo)]  # None: the default group, "kolo"
        tol = TOL.get(case, 1e-6)
        torch.manual_seed(0)
        start = Net().state_dict()
        kolo_state, gloo_state = (n.state_dict() for n in nets)
        for name, v in kolo_state.items():
            diff = (v.double() - gloo_state[name].double()).abs().max().item()
            check(diff <= tol, f"{case}: kolo vs gloo differ by {diff} in {name} (tolerance {tol})")
        moved = (kolo_state["a.weight"] - start["a.weight"]).abs().max().item()
        check(moved > 1e-3, f"{case}: training moved the weights ({moved})")
        print(f"ddp_options {case}: rank {R} agrees with gloo", flush=True)
    # gloo's threads are done with the last hook before the interpreter ends:
    # a thread that still reaches for the GIL then is torn down mid-C++ (SIGABRT).
    dist.barrier(group=gloo)
    dist.barrier()
    dist.destroy_process_group()
    done(f"ddp_options rank {R} of {N} [{','.join(CASES)}]")


main()
