"""A DistributedOptimizer training whose world goes from 3 ranks to 2 at step 8.

Started by test_reform.py as three processes with torchrun-style variables
(RANK, WORLD_SIZE=3, MASTER_ADDR, MASTER_PORT). argv: OUT_DIR PORT2 MODE, MODE
  kill    — rank 1 SIGKILLs itself during step 10 (after the forward pass, whose
            SyncBatchNorm allreduce it joined; before the backward pass, so the
            survivors' step fails half-issued); the survivors catch KoloError,
            shut down (a timeline is recording), restore the commit of step 8,
            re-form as 2 ranks on PORT2, sync and go on to step 20.
  planned — every rank shuts down before step 8, rank 1 leaves, the others
            re-form the same way: the reference the kill run must equal.
Each survivor writes OUT_DIR/rank.<old rank>.json: the error, how long
shutdown() took, and its final parameters.
"""
import json
import os
import signal
import sys
import time

import torch

import kolo.torch as hvd
import kolo.torch.optimizer

out_dir, port2, mode = sys.argv[1], sys.argv[2], sys.argv[3]
first_rank = int(os.environ["RANK"])
COMMIT_EVERY, FAIL_STEP, STEPS = 4, 10, 20

# One parameter a bucket, so that a step issues several allreduces before the
# SyncBatchNorm's own allreduce in the backward pass meets the dead peer.
kolo.torch.optimizer.FIRST_BUCKET_BYTES = 1
kolo.torch.optimizer.BUCKET_BYTES = 1

hvd.init()
if mode == "kill":
    hvd.start_timeline(os.path.join(out_dir, "timeline.json"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 6), hvd.SyncBatchNorm(6), torch.nn.ReLU(),
                            torch.nn.Linear(6, 2)).double()
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, step=0)
state.sync()


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(5, 2, generator=g, dtype=torch.float64)


def reform():
    """The launcher's part, done by hand: the survivors 0 and 2 become ranks 0 and 1 of a new job."""
    os.environ.update(RANK=str({0: 0, 2: 1}[first_rank]), WORLD_SIZE="2", MASTER_PORT=port2)
    hvd.init()
    state.on_reset()
    state.sync()


result = {"rank": first_rank}
while state.step < STEPS:
    if mode == "planned" and state.step == 8 and hvd.size() == 3:
        hvd.shutdown()
        if first_rank == 1:
            sys.exit(0)
        reform()
    try:
        if state.step % COMMIT_EVERY == 0:
            state.commit()
        x, y = batch(state.step, hvd.rank())
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        if first_rank == 1 and state.step == FAIL_STEP and mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        handle = hvd.allreduce_async(loss.detach(), name="loss")  # left pending by the failure
        loss.backward()
        optimizer.step()
        hvd.synchronize(handle)
        state.step += 1
    except hvd.HorovodInternalError as e:
        result["error"] = str(e)
        result["failed_step"] = state.step
        t0 = time.monotonic()
        hvd.shutdown()
        result["shutdown_s"] = time.monotonic() - t0
        state.restore()
        result["restored_step"] = state.step
        reform()

result["size"] = hvd.size()
result["params"] = {n: p.detach().flatten().tolist() for n, p in model.state_dict().items()}
result["momentum"] = [s["momentum_buffer"].flatten().tolist() for s in optimizer.state.values()]
with open(os.path.join(out_dir, f"rank.{first_rank}.json"), "w") as f:
    json.dump(result, f)
hvd.shutdown()
