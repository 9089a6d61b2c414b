"""Every refused input raises on every rank with a message naming the rank
and the problem; mismatched calls get kolo's mismatch error on every rank,
never a hang. Run under kolorun with 2 or more ranks.

argv[1]: "usable" — every rank catches each mismatch at the fingerprint
check (one host, shared memory), so the communicator must remain usable;
"either" — (TCP) a rank may only see a peer fail, and then every rank must
find the communicator unusable."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import check, done  # noqa: E402

import kolo.torch as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
PREFIX = f"kolo rank {R}: "


def raises(kind, fragments, fn, what):
    """fn() raises kind whose text starts with this rank's prefix and holds every fragment."""
    try:
        fn()
    except kind as e:
        text = str(e)
        check(text.startswith(PREFIX) and all(f in text for f in fragments),
              f"{what}: unexpected text {text!r} (wanted {fragments})")
        return text
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}")
    check(False, f"{what}: did not raise")


def foreign_device_tensor():
    """A CUDA tensor when this torch can make one, else a meta-device tensor
    (Debian's torch is CPU-only: torch.empty(device='cuda') fails by itself)."""
    try:
        return torch.empty(3, device="cuda"), "cuda"
    except (AssertionError, RuntimeError):
        return torch.empty(3, device="meta"), "meta"


def local_errors():
    strided = torch.ones(3, 4).t()
    raises(ValueError, ["allreduce", "not contiguous", "contiguous()"], lambda: hvd.allreduce(strided),
           "non-contiguous allreduce")
    raises(ValueError, ["broadcast_", "not contiguous"], lambda: hvd.broadcast_(strided, 0),
           "non-contiguous broadcast_")
    raises(ValueError, ["allgather", "not contiguous"], lambda: hvd.allgather(strided),
           "non-contiguous allgather")
    dev, kind = foreign_device_tensor()
    for fn, name in ((hvd.allreduce, "allreduce"), (hvd.allgather, "allgather"),
                     (lambda t: hvd.broadcast(t, 0), "broadcast")):
        raises(ValueError, [name, f"on device {kind}", "kolo handles CPU and CUDA tensors"], lambda: fn(dev),
               f"{kind} tensor to {name}")
    for dtype in (torch.complex64, torch.complex128):
        raises(TypeError, ["allreduce", f"dtype {dtype}", "does not support"],
               lambda: hvd.allreduce(torch.zeros(2, dtype=dtype)), f"{dtype}")
    raises(TypeError, ["alltoall", "torch.complex64"],
           lambda: hvd.alltoall(torch.zeros(N, dtype=torch.complex64)), "complex alltoall")
    raises(NotImplementedError, ["allreduce", "Adasum", "not supported"],
           lambda: hvd.allreduce(torch.ones(2), op=hvd.Adasum), "Adasum")
    raises(ValueError, ["allreduce", "op 42 is not supported"],
           lambda: hvd.allreduce(torch.ones(2), op=42), "op 42")
    raises(TypeError, ["op Average is not defined for bool"],
           lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool)), "bool average")
    raises(TypeError, ["prescale_factor=0.5 cannot scale a bool tensor"],
           lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Sum, prescale_factor=0.5),
           "bool prescale")
    model = torch.nn.Linear(2, 2)
    raises(ValueError, ["DistributedOptimizer", "op Max is not supported"],
           lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1), op=hvd.Max),
           "DistributedOptimizer op=Max")
    raises(ValueError, ["splits [", f"sum to {N + 1}"],
           lambda: hvd.alltoall(torch.zeros(N), splits=[1] * (N - 1) + [2]), "alltoall splits sum")
    raises(ValueError, ["splits must be integer counts, got a torch.float32 tensor"],
           lambda: hvd.alltoall(torch.zeros(N), splits=torch.ones(N)), "alltoall splits of floats")


def agreed_errors():
    """Errors found by comparing every rank's description: the same on every rank."""
    # kolo.Error is a RuntimeError, as Horovod's HorovodInternalError
    raises(hvd.HorovodInternalError, ["allgather", "ranks disagree on the shape beyond the first dimension",
                        "rank 0 has (1, 1), rank 1 has (1, 2)"],
           lambda: hvd.allgather(torch.zeros(1, R + 1)), "allgather trailing shape")
    raises(RuntimeError, ["allgather", "ranks disagree on the dtype", "rank 0 has torch.float32",
                       "rank 1 has torch.float64"],
           lambda: hvd.allgather(torch.zeros(2, dtype=torch.float32 if R == 0 else torch.float64)),
           "allgather dtype")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2 if R == 0 else 3)
    raises(RuntimeError, ["broadcast_parameters", "the parameters differ between ranks",
                        "differ from rank 0"],
           lambda: hvd.broadcast_parameters(model.state_dict(), 0), "broadcast_parameters models")
    # the communicator is still usable after all of these
    check(hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N, "usable after refused inputs")


MODE = sys.argv[1]
calls = 0  # correct collectives after a mismatch, to tell the ranks' values apart


def correct_collectives():
    """Blocking and asynchronous collectives on the communicator give exact results."""
    global calls
    calls += 1
    x = torch.full((1000,), float(R + calls))
    got = hvd.allreduce(x, op=hvd.Sum)
    want = float(sum(r + calls for r in range(N)))
    check(bool((got == want).all()), f"allreduce after a mismatch: {got[:3]} vs {want}")
    h = hvd.allgather_async(torch.full((R + 1, 2), float(R)))
    g = hvd.synchronize(h)
    check(g.tolist() == [[float(r)] * 2 for r in range(N) for _ in range(r + 1)],
          f"allgather after a mismatch: {g.tolist()}")
    b = hvd.broadcast(torch.full((3,), float(R + calls)), N - 1)
    check(b.tolist() == [float(N - 1 + calls)] * 3, f"broadcast after a mismatch: {b.tolist()}")


def mismatch(what, fn, fragments):
    """A kolo mismatch: every rank raises kolo.Error (a RuntimeError). Where
    every rank caught it at the check the communicator remains usable;
    otherwise it is unusable on every rank until shutdown() and init()."""
    text = raises(RuntimeError, ["mismatched collectives"] + fragments, fn, what)
    usable = "the communicator remains usable" in (text or "")
    if MODE == "usable":
        check(usable, f"{what}: the communicator should remain usable: {text!r}")
    if usable:
        correct_collectives()
        return
    raises(RuntimeError, ["communicator is unusable after an earlier failure", "mismatched"],
           lambda: hvd.allreduce(torch.ones(1)), f"{what}: the next call")
    hvd.shutdown()
    hvd.init()
    correct_collectives()


local_errors()
agreed_errors()
mismatch("allreduce of different shapes", lambda: hvd.allreduce(torch.zeros(4 + min(R, 1))),
         ["allreduce(f32, 4", "allreduce(f32, 5"])
# Horovod's shape check: one count, two shapes (Horovod's test_horovod_allreduce_error)
wide_or_deep = (lambda: torch.ones(17, 23 * 57)) if R == 0 else (lambda: torch.ones(17, 23, 57))
shape_cases = [("allreduce", hvd.allreduce), ("reducescatter", hvd.reducescatter)]
if MODE == "usable":  # over TCP a root that receives nothing sees nothing until the next call
    shape_cases.append(("broadcast", lambda t: hvd.broadcast(t, 0)))
for name, call in shape_cases:
    kolo_name = {"reducescatter": "reduce_scatter"}.get(name, name)
    mismatch(f"{name} of one count in two shapes", lambda: call(wide_or_deep()),
             [f"{kolo_name}(f32, ", "shape hash"])
mismatch("allreduce of different dtypes",
         lambda: hvd.allreduce(torch.zeros(4, dtype=torch.float32 if R == 0 else torch.float64)),
         ["allreduce(f32, 4", "allreduce(f64, 4"])
mismatch("different collectives",
         lambda: hvd.allreduce(torch.zeros(4)) if R == 0 else hvd.broadcast(torch.zeros(4), 0),
         ["allreduce(f32, 4", "broadcast(f32, 4, root=0)"])
if MODE == "usable":  # over TCP two roots that receive nothing see nothing until the next call
    mismatch("broadcast from different roots (asynchronous)",
             lambda: hvd.synchronize(hvd.broadcast_async(torch.zeros(4), min(R, 1))),
             ["broadcast(f32, 4, root=0)", "broadcast(f32, 4, root=1)"])
# and shutdown() + init() of a healthy communicator, twice; rank 0 late to
# shut down (the others init() again first: a store rank 0 hosts must hold)
for _ in range(2):
    if R == 0:
        time.sleep(0.5)
    hvd.shutdown()
    hvd.init()
    correct_collectives()
check(hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N, "a new communicator after shutdown()")
done(f"errors rank {R} of {N}")
