"""Shared by the worker programs that pytest starts under kolorun.

Inputs are deterministic functions of (rank, dtype, size), so every rank can
compute every other rank's input and so the expected result on its own,
in Python integers or float64 — independently of kolo."""
import os
import signal
import sys

import torch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.uint8, torch.int8, torch.int16, torch.bool]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
HALF = {torch.float16, torch.bfloat16}

checks = 0

# KOLO_TEST_DEVICE=cuda (tests/gpu/run-on-device.sh): the same workers on CUDA
# tensors. Every tensor a worker makes is then on this rank's GPU (local rank
# modulo the GPUs: ranks may share one), while their checks still compare with
# Python numbers computed independently of kolo.
DEVICE = os.environ.get("KOLO_TEST_DEVICE", "cpu")
if DEVICE == "cuda":
    if not torch.cuda.is_available():
        raise SystemExit("KOLO_TEST_DEVICE=cuda, but torch sees no GPU")
    _gpu = int(os.environ.get("KOLO_LOCAL_RANK", "0")) % torch.cuda.device_count()
    torch.cuda.set_device(_gpu)
    torch.set_default_device(f"cuda:{_gpu}")
    DEVICE_ID = torch.device(f"cuda:{_gpu}")  # this rank's device, as init_process_group's device_id
elif DEVICE == "cpu":
    DEVICE_ID = torch.device("cpu:0")
else:
    raise SystemExit(f"KOLO_TEST_DEVICE={DEVICE}: expected cpu or cuda")


def randn(*shape, generator, dtype=None):
    """torch.randn from a CPU generator (the same numbers on every rank, on
    the CPU and on a GPU), on this rank's device: a CPU generator cannot fill
    CUDA memory, which the default device above makes of every tensor."""
    x = torch.randn(*shape, generator=generator, dtype=dtype, device="cpu")
    return x.to(DEVICE_ID) if DEVICE == "cuda" else x


def await_the_kill(result_dir, rank):
    """For the kill tests: ignore kolorun's SIGTERM (the test wants kolo's own
    detection of the dead peer reported) and leave this rank's pid, and on
    rank 0 the job id, in result_dir for the test to check."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(result_dir, f"rank.{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    if rank == 0:
        with open(os.path.join(result_dir, "job"), "w") as f:
            f.write(os.environ.get("KOLO_JOB_ID", "?"))


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise AssertionError(f"rank {os.environ.get('KOLO_RANK', '?')}: check failed: {what}")


def values(rank, dtype, n, wide=False):
    """Python numbers: rank's input of n elements.

    Small positive integers (exact in every dtype, products of 3 ranks stay
    below 2^11); `wide` spans -100..99 so that int8 sums wrap."""
    if dtype == torch.bool:
        return [((i + rank) % 3) == 0 for i in range(n)]
    if wide:
        return [((i * 37 + rank * 53) % 200) - 100 for i in range(n)]
    base = [((i * 7 + rank * 13) % 11) + 1 for i in range(n)]
    if dtype in (torch.int8, torch.int16, torch.int32, torch.int64) or dtype in FLOATS:
        base = [v - 4 for v in base]  # negatives too
    return base


def tensor(vals, dtype):
    return torch.tensor(vals, dtype=dtype) if vals else torch.empty(0, dtype=dtype)


def wrap(v, dtype):
    """Two's-complement wrap of a Python int into dtype's range."""
    bits = {torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64, torch.uint8: 8}[dtype]
    v %= 1 << bits
    if dtype != torch.uint8 and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def same(got, want_vals, dtype, tol=None):
    """got (tensor) equals the Python reference values (exact unless tol)."""
    if got.dtype != dtype or got.numel() != len(want_vals):
        return False
    if tol is None:
        return got.tolist() == want_vals if got.dim() == 1 else got.reshape(-1).tolist() == want_vals
    ref = torch.tensor(want_vals, dtype=torch.float64)
    return bool(torch.allclose(got.to(torch.float64).reshape(-1), ref, rtol=tol, atol=tol))


def done(name):
    print(f"{name}: OK ({checks} checks)", flush=True)
    sys.stdout.flush()
