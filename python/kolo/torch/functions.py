"""Whole-model helpers: broadcast_parameters, broadcast_optimizer_state,
broadcast_object, allgather_object (Horovod's names and arguments)."""
import ctypes
import pickle
import zlib

import torch

from kolo import _C
from kolo.basics import comm, error, rank
from kolo.process_sets import root_in_scope, with_process_set
from kolo.torch.dtypes import check_tensor, move_code, place


def _i64(values):
    return torch.tensor(values, dtype=torch.int64, device="cpu")


def _bytes(t):
    """The bytes of a contiguous uint8 CPU tensor. Not t.numpy(): PyPI's torch
    does not require NumPy, and `pip install kolo torch` brings none."""
    return ctypes.string_at(t.data_ptr(), t.numel()) if t.numel() else b""


def _check_same_everywhere(what, description):
    """Every rank learns whether all ranks have the same description (names,
    shapes, dtypes) — one allgather of a digest, so a mismatch is the same
    error on every rank rather than a hang or a wrong broadcast."""
    c = comm()
    digest = zlib.crc32(description.encode())
    mine = _i64([digest])
    every = torch.empty(c.size(), dtype=torch.int64, device="cpu")
    c.allgather(mine.data_ptr(), every.data_ptr(), 1, _C.I64)
    differ = [r for r, d in enumerate(every.tolist()) if d != every[0].item()]
    if differ:
        raise _C.Error(error(what, f"the parameters differ between ranks (names, shapes or dtypes): "
                               f"rank{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))} "
                               "differ from rank 0"))


@with_process_set
def broadcast_parameters(params, root_rank=0, process_set=None):
    """Copies root_rank's parameters (a state_dict, named_parameters(), or a
    list of tensors or (name, tensor) pairs) into every rank's, in place.

    Tensors of one dtype and device travel as one fused buffer (CUDA
    tensors in CUDA memory, on torch's current stream)."""
    what = "broadcast_parameters"
    if isinstance(params, dict):
        items = sorted(params.items(), key=lambda kv: str(kv[0]))
    else:
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    items = [(n, p) for n, p in items if p is not None]
    for n, p in items:
        check_tensor(what, p, n)
    _check_same_everywhere(what, ";".join(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in items))
    fused = {}
    for n, p in items:
        fused.setdefault((p.dtype, p.device), []).append(p)
    c = comm()
    for ps in fused.values():
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in ps]) if ps else None
            dt, count = move_code(flat)
            c.broadcast(flat.data_ptr(), count, dt, root_in_scope(root_rank, what), **place(flat))
            if rank() != root_rank:
                offset = 0
                for p in ps:
                    p.detach().copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()


@with_process_set
def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's object (pickled) on every rank."""
    c = comm()
    root = root_in_scope(root_rank, "broadcast_object")
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if c.rank() == root else b""
    length = _i64([len(payload)])
    c.broadcast(length.data_ptr(), 1, _C.I64, root)
    buf = torch.empty(int(length[0]), dtype=torch.uint8, device="cpu")
    if c.rank() == root:
        buf = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload else buf
    c.broadcast(buf.data_ptr(), buf.numel(), _C.U8, root)
    return obj if c.rank() == root else pickle.loads(_bytes(buf))


@with_process_set
def allgather_object(obj, name=None, process_set=None):
    """The list of every rank's object, in rank order."""
    c = comm()
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    mine = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    sizes = torch.empty(c.size(), dtype=torch.int64, device="cpu")
    n = _i64([len(payload)])
    c.allgather(n.data_ptr(), sizes.data_ptr(), 1, _C.I64)
    counts = sizes.tolist()
    out = torch.empty(sum(counts), dtype=torch.uint8, device="cpu")
    c.allgatherv(mine.data_ptr(), out.data_ptr(), counts, _C.U8)
    raw, objs, off = _bytes(out), [], 0
    for k in counts:
        objs.append(pickle.loads(raw[off:off + k]))
        off += k
    return objs


@with_process_set
def broadcast_optimizer_state(optimizer, root_rank=0, process_set=None):
    """Every rank gets root_rank's optimizer state and hyper-parameters.

    The whole state_dict travels as one pickled object, so any optimizer and
    any state (momentum buffers, step counters, lr) works, whether or not
    the other ranks have stepped yet."""
    _initialize_state(optimizer)
    # Pickled on the CPU: a CUDA tensor unpickles onto its own device, the
    # root's GPU, which another rank may not see (or would make a context on);
    # load_state_dict moves the state to each parameter's device.
    state = broadcast_object(_on_cpu(optimizer.state_dict()) if rank() == root_rank else None, root_rank)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


def _on_cpu(obj):
    """obj with every tensor in it (dicts, lists, tuples) copied to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: _on_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_on_cpu(v) for v in obj)
    return obj


def _initialize_state(optimizer):
    """As Horovod does: a new optimizer (no state yet) takes one local step on
    zero gradients, so that its state (momentum buffers...) exists and every
    parameter that requires a gradient has one (zeros) afterwards; a
    DistributedOptimizer takes it without synchronizing (no collective)."""
    if optimizer.state_dict()["state"] or isinstance(optimizer, torch.optim.LBFGS):
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    if hasattr(optimizer, "skip_synchronize"):
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()
