"""DistributedOptimizer against a single-process reference that every rank
computes itself; join() with uneven numbers of batches; a rank killed
mid-training. Run under kolorun: training_worker.py MODE [RESULT_DIR].

  optimizer  N ranks x batch b == 1 process x batch N*b (SGD with momentum,
             float64, 5 steps), also with backward_passes_per_step=2,
             op=Sum, gradient_predivide_factor, fp16/bf16 compression and
             synchronize() + skip_synchronize()
  join       rank r has 3 + r batches, then calls join(): every step's
             gradient is the average over the ranks still active
  kill       rank 1 SIGKILLs itself at step 3; the others must raise a
             kolo error naming rank 1 (written to RESULT_DIR/rank.R.err)
"""
import contextlib
import copy
import gc
import os
import signal
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import DEVICE, await_the_kill, check, done, randn  # noqa: E402

import kolo.torch as hvd  # noqa: E402
from kolo.torch import optimizer as kolo_optimizer  # noqa: E402

MODE = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
B = 4  # per-rank batch
torch.set_num_threads(1)


def make_model(dtype=torch.float64):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(dtype)


def batch(step, rows, first=0, dtype=torch.float64):
    """The global batch of a step (the same on every rank), rows first:first+rows."""
    g = torch.Generator().manual_seed(1000 + step)
    x = randn(64, 5, generator=g, dtype=dtype)
    y = randn(64, 3, generator=g, dtype=dtype)
    return x[first:first + rows], y[first:first + rows]


def loss_fn(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train_reference(steps, rows, passes=1, loss_scale=1.0, dtype=torch.float64):
    model = make_model(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for s in range(steps):
        opt.zero_grad()
        for k in range(passes):
            x, y = batch(s * passes + k, rows, dtype=dtype)
            (loss_fn(model, x, y) * loss_scale / passes).backward()
        opt.step()
    return params(model)


def train_distributed(steps, passes=1, sync_first=False, dtype=torch.float64, side_stream=False, **kwargs):
    """side_stream (CUDA): the optimizer is made on the default stream, the
    steps run on another one, each behind a GPU sleep, so that a reducer that
    read gradients or wrote results out of order with them would see stale
    values."""
    model = make_model(dtype)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, **kwargs)
    check(isinstance(opt, torch.optim.SGD), "DistributedOptimizer is an SGD")
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    with torch.cuda.stream(torch.cuda.Stream()) if side_stream else contextlib.nullcontext():
        for s in range(steps):
            opt.zero_grad()
            for k in range(passes):
                x, y = batch(s * passes + k, B, first=R * B, dtype=dtype)
                if side_stream:
                    torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time before backward's kernels
                (loss_fn(model, x, y) / passes).backward()
            if sync_first:
                opt.synchronize()
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()
        got = params(model)
    if side_stream:
        torch.cuda.synchronize()
    return got


def close(a, b, tol):
    return a.shape == b.shape and torch.allclose(a, b, rtol=tol, atol=tol)


def mode_optimizer():
    ref = train_reference(5, N * B)
    got = train_distributed(5)
    check(close(got, ref, 1e-10), f"N x b == 1 x N*b: max diff {(got - ref).abs().max()}")
    caps = kolo_optimizer.FIRST_BUCKET_BYTES, kolo_optimizer.BUCKET_BYTES
    kolo_optimizer.FIRST_BUCKET_BYTES, kolo_optimizer.BUCKET_BYTES = 16, 50  # 4 buckets
    got = train_distributed(5)
    kolo_optimizer.FIRST_BUCKET_BYTES, kolo_optimizer.BUCKET_BYTES = caps
    check(close(got, ref, 1e-10), "with small buckets (several per step)")
    got = train_distributed(5, sync_first=True)
    check(close(got, ref, 1e-10), "synchronize() + skip_synchronize()")
    if DEVICE == "cuda":
        got = train_distributed(5, side_stream=True)
        check(close(got, ref, 1e-10), f"training on another stream: max diff {(got - ref).abs().max()}")
    got = train_distributed(5, gradient_predivide_factor=4.0)
    check(close(got, ref, 1e-10), "gradient_predivide_factor")
    ref2 = train_reference(3, N * B, passes=2)
    got = train_distributed(3, passes=2)
    check(close(got, ref2, 1e-10), f"backward_passes_per_step=2: {(got - ref2).abs().max()}")
    ref_sum = train_reference(5, N * B, loss_scale=N)
    got = train_distributed(5, op=hvd.Sum)
    check(close(got, ref_sum, 1e-10), "op=Sum is the gradient of the summed loss")
    ref32 = train_reference(5, N * B, dtype=torch.float32)
    for comp in (hvd.Compression.fp16, hvd.Compression.bf16):
        got = train_distributed(5, dtype=torch.float32, compression=comp)
        check(close(got, ref32, 2e-2), f"{comp.__name__}: max diff {(got - ref32).abs().max()}")


def mode_join():
    batches = [3 + r for r in range(N)]
    kolo_optimizer.FIRST_BUCKET_BYTES, kolo_optimizer.BUCKET_BYTES = 16, 50  # joined ranks mirror 4
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    check(len(opt._buckets) == 4, f"{len(opt._buckets)} buckets")
    for s in range(batches[R]):
        opt.zero_grad()
        x, y = batch(s, B, first=R * B)
        loss_fn(model, x, y).backward()
        opt.step()
    last = hvd.join()
    check(last == N - 1, f"join returned {last}, expected the last rank to join ({N - 1})")
    # Reference: at step s the gradient is the mean over the ranks still active.
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    snapshots = []
    for s in range(max(batches)):
        active = [r for r in range(N) if batches[r] > s]
        grads = []
        for r in active:
            m = copy.deepcopy(ref)
            x, y = batch(s, B, first=r * B)
            loss_fn(m, x, y).backward()
            grads.append([p.grad for p in m.parameters()])
        ref_opt.zero_grad()
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in grads) / len(active)
        ref_opt.step()
        snapshots.append(params(ref))
    mine = params(model)
    want = snapshots[batches[R] - 1]
    check(close(mine, want, 1e-10), f"join: rank {R} after its {batches[R]} steps, diff "
          f"{(mine - want).abs().max()}")
    hvd.broadcast_parameters(model.state_dict(), root_rank=N - 1)
    check(close(params(model), snapshots[-1], 1e-10), "after broadcasting the last rank's model")
    if N > 1 and os.environ.get("KOLO_TRANSPORT") == "shm":
        join_then_allgather()


def join_then_allgather():
    """As Horovod: an allgather against a joined rank is an error on the rank
    that issued it; the joined rank goes on waiting, the other joins later,
    and join() returns the last rank to join. Before it every rank steps an
    optimizer twice that only rank 0 keeps alive (as the garbage collector
    frees a finished one on one rank before another): the steps count on
    every rank alike, whether the optimizer still lives or not."""
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for s in range(2):
        opt.zero_grad()
        loss_fn(model, *batch(s, B, first=R * B)).backward()
        opt.step()
    kept = opt if R == 0 else None  # noqa: F841 (kept alive on rank 0 only)
    del opt, model
    gc.collect()
    check((kolo_optimizer.latest_optimizer() is None) == (R != 0), "the optimizer lives on rank 0 only")
    for first in range(N):
        if R == first:
            last = hvd.join()
        else:
            try:
                hvd.allgather(torch.ones(2, 3))
                check(False, "allgather against a joined rank did not raise")
            except RuntimeError as e:
                check("mismatched collectives" in str(e), f"allgather against join: {e}")
            last = hvd.join()
        check(last != first, f"join returned {last}, the rank that joined first")
        every = hvd.allgather_object(last)
        check(every == [last] * N, f"join returned {every} on the ranks")


def mode_kill():
    result_dir = sys.argv[2]
    await_the_kill(result_dir, R)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    try:
        for s in range(1000):
            if s == 3 and R == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            x, y = batch(s % 50, B, first=R * B)
            loss_fn(model, x, y).backward()
            opt.step()
        raise AssertionError("training went on without rank 1")
    except hvd.HorovodInternalError as e:
        with open(os.path.join(result_dir, f"rank.{R}.err"), "w") as f:
            f.write(str(e))
        print(f"rank {R} caught: {e}", flush=True)
        sys.exit(3)


for mode in MODE.split(","):
    {"optimizer": mode_optimizer, "join": mode_join, "kill": mode_kill}[mode]()
done(f"training rank {R} of {N} [{MODE}]")
