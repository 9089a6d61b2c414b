"""Horovod's tensor collectives on kolo: allreduce, allgather, broadcast,
alltoall, reducescatter (each blocking and asynchronous, in place where
Horovod has it), barrier, poll, synchronize.

Named operations are negotiated as Horovod's are: allreduce, allgather,
broadcast and reducescatter given a ``name`` may be issued in a different
order on each rank (kolo's engine agrees one order; kolo.h), and a second one
with a name still in flight raises ValueError on that rank. Unnamed ones are
matched by call order (as NCCL and DDP do): every rank issues them in the same
order, and a rank whose call differs gets kolo's mismatch error, on every
rank. alltoall is matched by call order, named or not.

The non-underscore, non-async functions are differentiable
(kolo/torch/autograd.py); these are the plain versions they call.
"""
import weakref

import torch

from kolo import _C, descriptions, handles
from kolo.basics import comm, error
from kolo.names import operation_key
from kolo.process_sets import root_in_scope, with_process_set
from kolo.reduce_ops import resolve_op
from kolo.splits import split_rows
from kolo.torch import dtypes
from kolo.torch.dtypes import Average, Sum, check_tensor, move_code, place, reduce_plan, through_host


def _scale(what, t, factor, kind):
    """t * factor as a new tensor of t's dtype (factor 1: t itself), as Horovod
    scales: integers in float64, then truncated back; f16/bf16 in float32."""
    if factor == 1.0:
        return t
    if t.dtype == torch.bool:
        raise TypeError(error(what, f"{kind}={factor} cannot scale a bool tensor"))
    if not t.is_floating_point():
        return (t.double() * factor).to(t.dtype)
    if t.element_size() < 4:
        return (t.float() * factor).to(t.dtype)
    return t * factor


def _through_host(key, src, dst):
    """(src, dst, back) for an operation named `key`: kolo's named operations
    take host memory only, so a CUDA tensor's goes through host copies
    (dtypes.through_host); unnamed: src, dst and no back."""
    return through_host(src, dst) if key else (src, dst, None)


def _name_next(name):
    """Horovod's name= labels the next collective in the timeline."""
    if name and _C.timeline_on():
        _C.timeline_name_next(str(name))


class _SinceJoin(weakref.WeakKeyDictionary):
    """A count per communicator since its last join(), gone with it (keys by
    id could pass one's count on to a later communicator at its address)."""

    def add(self, c, n=1):
        self[c] = self.get(c, 0) + n


# The named operations issued and the DistributedOptimizer steps taken:
# join() tells the rank that joined last by them (torch/optimizer.py).
# Counted per communicator, not on the optimizer: join() finds the optimizer
# through a weak reference, and an optimizer no longer used lives until the
# garbage collector frees it, at a different moment on each rank (once one
# rank counted a dead test's steps and its peer did not, and join() named the
# wrong rank).
named_issued = _SinceJoin()
steps_taken = _SinceJoin()


_key = operation_key  # the engine's name of a named operation (kolo/names.py)


def _handle(work, keep, finish):
    """handles.add for torch tensors. finish() runs at synchronize(), maybe
    on another stream than the one the temporaries in keep were made on: each
    CUDA tensor is marked used on that stream before the handle lets it go,
    so that torch's caching allocator does not hand its memory out again
    while finish()'s copies may still read it."""
    cuda = [t for t in keep if isinstance(t, torch.Tensor) and t.is_cuda]
    if not cuda:
        return handles.add(work, keep, finish)

    def finished():
        result = finish()
        for t in cuda:
            t.record_stream(torch.cuda.current_stream(t.device))
        return result
    return handles.add(work, keep, finished)


# ---- allreduce ---------------------------------------------------------------------
def _allreduce_start(what, tensor, output, op, prescale, postscale, name, blocking):
    """Reduces tensor into output (output may be tensor: in place).

    The common case (a native dtype, no scaling) is two pointer reads and one
    C++ call; the rest is done around it."""
    check_tensor(what, tensor, name)
    wide, dt, code = reduce_plan(what, tensor, op)
    int_average = code == _C.AVERAGE and not tensor.is_floating_point()
    if int_average:
        code = _C.SUM  # Horovod's integer average: sum, then division rounded toward zero
    src = _scale(what, tensor, prescale, "prescale_factor")
    if wide is not None:
        src = src.to(wide)
        dst = src
    else:
        dst = output
    c = comm()
    key = _key("allreduce", name)
    hsrc, hdst, back = _through_host(key, src, dst)
    args = (hsrc.data_ptr(), hdst.data_ptr(), src.numel(), dt, code, tensor.shape)  # shape: as Horovod's check
    where = place(hsrc)

    if dst is output and postscale == 1.0 and not int_average and back is None:
        finish = lambda: output  # noqa: E731
    else:
        def finish():
            if back is not None:
                back()
            if dst is not output:
                output.copy_(dst)  # narrows (wraps like int8/int16 arithmetic) or u8 -> bool
            if int_average:
                output.div_(c.size(), rounding_mode="trunc")
            if postscale != 1.0:
                output.copy_(_scale(what, output, postscale, "postscale_factor"))
            return output
    _name_next(name)
    if blocking and not key:
        c.allreduce(*args, **where)
        return finish()
    named_issued.add(c, bool(key))
    work = c.allreduce_async(*args, **where, name=key)
    if blocking:
        work.wait()
        return finish()
    return _handle(work, (tensor, src, dst, output, hsrc, hdst), finish)


@with_process_set
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    op = resolve_op("allreduce_async", average, op)
    return _allreduce_start("allreduce_async", tensor, torch.empty_like(tensor), op,
                            prescale_factor, postscale_factor, name, False)


@with_process_set
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    op = resolve_op("allreduce_async_", average, op)
    return _allreduce_start("allreduce_async_", tensor, tensor, op, prescale_factor,
                            postscale_factor, name, False)


@with_process_set
def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    op = resolve_op("allreduce_", average, op)
    return _allreduce_start("allreduce_", tensor, tensor, op, prescale_factor,
                            postscale_factor, name, True)


def allreduce_nograd(tensor, op, prescale_factor=1.0, postscale_factor=1.0, name=None,
                     what="allreduce"):
    return _allreduce_start(what, tensor, torch.empty_like(tensor), op, prescale_factor,
                            postscale_factor, name, True)


@with_process_set
def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None):
    """One handle for a list of tensors; synchronize() returns the list."""
    op = resolve_op("grouped_allreduce_async", average, op)
    return _grouped([allreduce_async(t, None, _member(name, i), op, prescale_factor, postscale_factor)
                     for i, t in enumerate(tensors)])


@with_process_set
def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    op = resolve_op("grouped_allreduce_async_", average, op)
    return _grouped([allreduce_async_(t, None, _member(name, i), op, prescale_factor, postscale_factor)
                     for i, t in enumerate(tensors)])


@with_process_set
def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor))


def _member(name, i):
    """A grouped call's i-th operation: its own name (one name in flight once)."""
    return None if name is None or name == "" else f"{name}.{i}"


class _GroupWork:
    """The Work of a grouped call: done when every member is."""

    def __init__(self, hs):
        self.hs = hs

    def test(self):
        return all(handles.poll(h) for h in self.hs)

    def wait(self):
        pass  # finish() synchronizes every member, in order


def _grouped(hs):
    return handles.add(_GroupWork(hs), hs, lambda: [synchronize(h) for h in hs])


# ---- allgather ---------------------------------------------------------------------
_DTYPE_INDEX = {d: i for i, d in enumerate(
    [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
     torch.uint8, torch.int8, torch.int16, torch.bool])}
_INDEX_DTYPE = {i: d for d, i in _DTYPE_INDEX.items()}


def _gather_descriptions(what, t, extra=()):
    """Every rank's description of t (kolo/descriptions.py); checks dtype and the
    shape beyond dim 0 — the same error on every rank when they disagree:
    kolo.Error, a RuntimeError, as Horovod's HorovodInternalError."""
    c = comm()
    mine = torch.tensor(descriptions.describe(_DTYPE_INDEX[t.dtype], t.shape, extra), dtype=torch.int64,
                        device="cpu")
    table = torch.empty(c.size(), mine.numel(), dtype=torch.int64, device="cpu")
    c.allgather(mine.data_ptr(), table.data_ptr(), mine.numel(), _C.I64)
    return descriptions.check_rows(what, table.tolist(), lambda i: _INDEX_DTYPE[i])


def _gather_plan(t, rows):
    """The output and each rank's element count (in move units) of an allgather of t."""
    firsts = [row[2] for row in rows]
    output = t.new_empty((sum(firsts),) + tuple(t.shape[1:]))
    dt, n = move_code(t)
    per_row = n // t.shape[0] if t.shape[0] else _row_units(t)
    return output, [f * per_row for f in firsts], dt


def _allgather_start(what, tensor, name, blocking):
    check_tensor(what, tensor, name)
    t = tensor.reshape(1) if tensor.dim() == 0 else tensor
    key = _key("allgather", name)
    if key:
        return _allgather_named(what, t, key, name, blocking)
    rows = _gather_descriptions(what, t)
    output, counts, dt = _gather_plan(t, rows)
    c = comm()
    args = (t.data_ptr(), output.data_ptr(), counts, dt)
    where = place(t)
    _name_next(name)
    if blocking:
        c.allgatherv(*args, **where)
        return output
    return _handle(c.allgatherv_async(*args, **where), (t, output), lambda: output)


def _allgather_named(what, t, key, name, blocking):
    """A named allgather in two named operations: every rank's description
    (the rows each sends) under `key`, issued now, then the rows themselves,
    issued when the handle is synchronized (the output's size is known only
    then). Ranks that synchronize two named allgathers in opposite orders
    therefore wait for each other: synchronize them in one order."""
    c = comm()
    mine = torch.tensor(descriptions.describe(_DTYPE_INDEX[t.dtype], t.shape, ()), dtype=torch.int64,
                        device="cpu")
    table = torch.empty(c.size(), mine.numel(), dtype=torch.int64, device="cpu")
    named_issued.add(c)
    described = c.allgather_async(mine.data_ptr(), table.data_ptr(), mine.numel(), _C.I64, name=key)
    rows_of = t.cpu() if t.is_cuda else t  # named operations take host memory (_through_host)

    def finish():
        described.wait()
        rows = descriptions.check_rows(what, table.tolist(), lambda i: _INDEX_DTYPE[i])
        output, counts, dt = _gather_plan(rows_of, rows)
        _name_next(name)
        c.allgatherv_async(rows_of.data_ptr(), output.data_ptr(), counts, dt, name=key + ".data").wait()
        return output.to(t.device) if t.is_cuda else output
    if blocking:
        return finish()
    return _handle(described, (t, mine, table, rows_of), finish)


def _row_units(t):
    """Elements (in move units) per first-dimension row, for an empty tensor."""
    n = 1
    for d in t.shape[1:]:
        n *= d
    return n * (1 if t.dtype in dtypes._NATIVE else t.element_size())


@with_process_set
def allgather_async(tensor, name=None, process_set=None):
    return _allgather_start("allgather_async", tensor, name, False)


def allgather_nograd(tensor, name=None):
    return _allgather_start("allgather", tensor, name, True)


@with_process_set
def grouped_allgather_async(tensors, name=None, process_set=None):
    return _grouped([allgather_async(t, _member(name, i)) for i, t in enumerate(tensors)])


# ---- broadcast ---------------------------------------------------------------------
def _broadcast_start(what, tensor, output, root_rank, name, blocking):
    check_tensor(what, tensor, name)
    if output is not tensor:
        output.copy_(tensor)
    dt, n = move_code(output)
    c = comm()
    key = _key("broadcast", name)
    data, _, back = _through_host(key, output, output)
    args = (data.data_ptr(), n, dt, root_in_scope(root_rank, what), output.shape)
    where = place(data)

    def finish():
        if back is not None:
            back()
        return output
    _name_next(name)
    if blocking and not key:
        c.broadcast(*args, **where)
        return output
    named_issued.add(c, bool(key))
    work = c.broadcast_async(*args, **where, name=key)
    if blocking:
        work.wait()
        return finish()
    return _handle(work, (tensor, output, data), finish)


@with_process_set
def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return _broadcast_start("broadcast_async", tensor, torch.empty_like(tensor), root_rank, name,
                            False)


@with_process_set
def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return _broadcast_start("broadcast_async_", tensor, tensor, root_rank, name, False)


@with_process_set
def broadcast_(tensor, root_rank, name=None, process_set=None):
    return _broadcast_start("broadcast_", tensor, tensor, root_rank, name, True)


def broadcast_nograd(tensor, root_rank, name=None):
    return _broadcast_start("broadcast", tensor, torch.empty_like(tensor), root_rank, name, True)


# ---- alltoall ----------------------------------------------------------------------
def _alltoall_start(what, tensor, splits, name, blocking):
    """Sends rows splits[j] to rank j; returns (output, received_splits).

    One allgather of every rank's description (dtype, shape, splits) first:
    each rank checks its peers' tensors and learns what it receives; then
    kolo's alltoallv moves the rows. A CUDA tensor travels through host
    memory (kolo's alltoallv takes host memory only, kolo.h)."""
    check_tensor(what, tensor, name)
    c = comm()
    n, me = c.size(), c.rank()
    t = tensor.reshape(1) if tensor.dim() == 0 else tensor
    s = split_rows(what, t.shape[0], splits, n)
    rows = _gather_descriptions(what, t, s)
    recv_rows = [descriptions.extra_of(rows[src])[me] for src in range(n)]
    send = t.cpu() if t.is_cuda else t
    out = send.new_empty((sum(recv_rows),) + tuple(t.shape[1:]))
    unit = _row_units(t)
    code, _ = move_code(out)
    args = (send.data_ptr(), [r * unit for r in s], [], out.data_ptr(), [r * unit for r in recv_rows], [], code)
    received = torch.tensor(recv_rows, dtype=torch.int32, device="cpu")

    def finish():
        return (out.to(t.device) if t.is_cuda else out), received
    _name_next(name)
    if blocking:
        c.alltoallv(*args)
        return finish()
    return _handle(c.alltoallv_async(*args), (t, send, out), finish)


@with_process_set
def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """synchronize() returns (output, received_splits)."""
    return _alltoall_start("alltoall_async", tensor, splits, name, False)


def alltoall_nograd(tensor, splits=None, name=None):
    return _alltoall_start("alltoall", tensor, splits, name, True)


# ---- reducescatter -----------------------------------------------------------------
def reducescatter_rows(d0, n):
    """Horovod's split of the first dimension: lower ranks get the remainder."""
    return [d0 // n + (1 if r < d0 % n else 0) for r in range(n)]


def _reducescatter_start(what, tensor, op, prescale, postscale, name, blocking):
    check_tensor(what, tensor, name)
    if tensor.dim() == 0:
        raise ValueError(error(what, "needs a tensor with at least one dimension"))
    c = comm()
    n, me = c.size(), c.rank()
    wide, dt, code = reduce_plan(what, tensor, op)
    int_average = code == _C.AVERAGE and not tensor.is_floating_point()
    if int_average:
        code = _C.SUM
    src = _scale(what, tensor, prescale, "prescale_factor")
    if wide is not None:
        src = src.to(wide)
    d0, tail = src.shape[0], tuple(src.shape[1:])
    split = reducescatter_rows(d0, n)
    biggest = split[0]
    per_row = src[0].numel() if d0 else 0
    if d0 % n:  # blocks of equal size: pad every rank's block to the biggest
        padded = src.new_zeros((n * biggest,) + tail)
        for r, piece in enumerate(torch.split(src, split)):
            padded[r * biggest:r * biggest + split[r]].copy_(piece)
        src = padded
    out = src.new_empty((biggest,) + tail)
    key = _key("reducescatter", name)
    hsrc, hout, back = _through_host(key, src, out)
    args = (hsrc.data_ptr(), hout.data_ptr(), biggest * per_row, dt, code, tensor.shape)
    where = place(hsrc)

    def finish():
        if back is not None:
            back()
        res = out[:split[me]]
        if wide is not None or tensor.dtype == torch.bool:
            res = res.to(tensor.dtype)
        if int_average:
            res = res.div(n, rounding_mode="trunc")
        if postscale != 1.0:
            res = _scale(what, res, postscale, "postscale_factor")
        return res
    _name_next(name)
    if blocking and not key:
        c.reduce_scatter(*args, **where)
        return finish()
    named_issued.add(c, bool(key))
    work = c.reduce_scatter_async(*args, **where, name=key)
    if blocking:
        work.wait()
        return finish()
    return _handle(work, (tensor, src, out, hsrc, hout), finish)


@with_process_set
def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=None):
    return _reducescatter_start("reducescatter_async", tensor, op, prescale_factor,
                                postscale_factor, name, False)


def reducescatter_nograd(tensor, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None):
    return _reducescatter_start("reducescatter", tensor, op, prescale_factor, postscale_factor,
                                name, True)


@with_process_set
def grouped_reducescatter_async(tensors, name=None, op=Average, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=None):
    return _grouped([reducescatter_async(t, _member(name, i), op, prescale_factor, postscale_factor)
                     for i, t in enumerate(tensors)])


# ---- sparse ------------------------------------------------------------------------
@with_process_set
def sparse_allreduce_async(tensor, name, op, process_set=None):
    """Horovod's sparse allreduce: allgathers of the indices and the values.

    Returns a callable (not an integer handle, as in Horovod) that waits and
    gives the sparse sum (Average: divided by the set's size) as an
    uncoalesced tensor."""
    t = tensor
    indices = allgather_async(t._indices().transpose(0, 1).contiguous(), _member(name, "indices"))
    values = allgather_async(t._values(), _member(name, "values"))
    average = dtypes.op_code("sparse_allreduce_async", op) == _C.AVERAGE
    size = comm().size()  # the process set's, while this call runs on it

    def handle():
        v = synchronize(values)
        i = synchronize(indices)
        if average:
            v = v / size
        if i.dim() == 0 or v.dim() == 0:
            return t.new().resize_as_(t)
        return torch.sparse_coo_tensor(i.transpose(0, 1), v, t.size())
    return handle


# ---- the rest ----------------------------------------------------------------------
@with_process_set
def barrier(process_set=None):
    comm().barrier()


def poll(handle):
    return handles.poll(handle)


def synchronize(handle):
    return handles.synchronize(handle)
