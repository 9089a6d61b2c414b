"""kolo's collectives on NumPy arrays: what every kolo.tensorflow op runs,
eagerly on zero-copy views of tf.Tensors or inside tf.numpy_function.

`name`: the engine's name of the operation (bridge.run_named); "" matches
it by call order. A function that runs several collectives names them
name, name + ".data" (as kolo.torch's named allgather does).

Each function takes the communicator explicitly (resolved by the caller from
its process set) because inside a tf.function it runs on one of TensorFlow's
executor threads, where kolo.basics' thread-local scope is not set. Inputs
are read, never written (TF's buffers are immutable); results are new arrays.

dtypes: the seven kolo types natively; int8, int16, uint16 move as bytes
and reduce widened to int32 (narrowing back wraps, as their own arithmetic
would); bool moves as bytes and reduces as u8 (Sum/Max: OR, Product/Min:
AND). Average of an integer array is a sum followed by floor division, as in
Horovod; Average of bool is an error. Everything else is an error naming it.
"""
import math

import ml_dtypes
import numpy as np

from kolo import _C, descriptions
from kolo.basics import error
from kolo.splits import split_rows

_NATIVE = {np.dtype(np.float32): _C.F32, np.dtype(np.float64): _C.F64,
           np.dtype(np.float16): _C.F16, np.dtype(ml_dtypes.bfloat16): _C.BF16,
           np.dtype(np.int32): _C.I32, np.dtype(np.int64): _C.I64, np.dtype(np.uint8): _C.U8}
_WIDENED = {np.dtype(np.int8): np.dtype(np.int32), np.dtype(np.int16): np.dtype(np.int32),
            np.dtype(np.uint16): np.dtype(np.int32)}
_BOOL = np.dtype(np.bool_)
FLOATS = {np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16),
          np.dtype(ml_dtypes.bfloat16)}
_HALF = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
SUPPORTED = "float32, float64, float16, bfloat16, int64, int32, int16, int8, uint16, uint8, bool"
# A dtype's index in the shape/dtype descriptions ranks exchange (allgather).
_DTYPE_INDEX = {d: i for i, d in enumerate(list(_NATIVE) + list(_WIDENED) + [_BOOL])}
_INDEX_DTYPE = {i: d for d, i in _DTYPE_INDEX.items()}


def supported(dtype):
    return np.dtype(dtype) in _DTYPE_INDEX


def ptr(a):
    return a.__array_interface__["data"][0]


# TensorFlow's CPU kernels (Eigen) require 64-byte aligned buffers and abort
# the process on a tensor that is not (tensor.h "Check failed: IsAligned()");
# from_dlpack does not check, so every array handed to TF is made aligned.
ALIGN = 64


def empty(shape, dtype):
    """np.empty whose buffer starts on an ALIGN-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    off = (-ptr(raw)) % ALIGN
    return raw[off:off + nbytes].view(dtype).reshape(shape)


def aligned(a):
    """a itself when its buffer is aligned and C-contiguous, else an aligned copy."""
    if a.flags.c_contiguous and ptr(a) % ALIGN == 0:
        return a
    out = empty(a.shape, a.dtype)
    out[...] = a
    return out


def _contiguous(a):
    """a, or a C-ordered copy (np.ascontiguousarray would make a 0-d array 1-d)."""
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _is_float(dtype):
    return dtype.kind == "f" or dtype in _HALF


def move_plan(a):
    """(dtype code, element count) that moves a's bytes unchanged."""
    code = _NATIVE.get(a.dtype)
    return (code, a.size) if code is not None else (_C.U8, a.nbytes)


def reduce_plan(what, dtype, code):
    """(work dtype or None when native, kolo dtype code, kolo op code)."""
    if dtype == _BOOL:
        if code == _C.AVERAGE:
            raise TypeError(error(what, "op Average is not defined for bool tensors"))
        return np.dtype(np.uint8), _C.U8, {_C.SUM: _C.MAX, _C.PRODUCT: _C.MIN}.get(code, code)
    wide = _WIDENED.get(dtype)
    return wide, _NATIVE[wide or dtype], code


def scale(what, a, factor, kind):
    """a * factor in a's dtype, as Horovod scales: integers in float64 then
    truncated, half types in float32. factor 1 returns a itself."""
    if factor == 1.0:
        return a
    if a.dtype == _BOOL:
        raise TypeError(error(what, f"{kind}={factor} cannot scale a bool tensor"))
    if not _is_float(a.dtype):
        return (a.astype(np.float64) * factor).astype(a.dtype)
    if a.dtype in _HALF:
        return (a.astype(np.float32) * factor).astype(a.dtype)
    return (a * a.dtype.type(factor)).astype(a.dtype, copy=False)


def call(c, collective, name, *args):
    """c.<collective>(*args): matched by call order, or, named, negotiated on
    the engine's named channel and waited for."""
    if name:
        getattr(c, collective + "_async")(*args, name=name).wait()
    else:
        getattr(c, collective)(*args)


def allreduce(c, what, a, code, prescale=1.0, postscale=1.0, name=""):
    """The reduction of a over c's ranks, a new array of a's dtype and shape."""
    wide, dt, kcode = reduce_plan(what, a.dtype, code)
    int_average = kcode == _C.AVERAGE and not _is_float(a.dtype)
    if int_average:
        kcode = _C.SUM  # Horovod's integer average: sum, then floor division
    src = _contiguous(scale(what, a, prescale, "prescale_factor"))
    if wide is not None:
        src = src.astype(wide)
    out = empty(src.shape, src.dtype)
    call(c, "allreduce", name, ptr(src), ptr(out), src.size, dt, kcode, list(a.shape))
    if out.dtype != a.dtype:
        out = out.astype(a.dtype)  # narrows (wraps) or u8 -> bool
    if int_average:
        out //= c.size()
    return scale(what, out, postscale, "postscale_factor")


def allreduce_flat(c, flat, code):
    """In place on a contiguous 1-D buffer of a native dtype (the fused buckets)."""
    c.allreduce(ptr(flat), ptr(flat), flat.size, _NATIVE[flat.dtype], code, [])


def broadcast(c, what, a, root, name=""):
    """root's a on every rank (root: a rank of c), a new array."""
    out = empty(a.shape, a.dtype)
    out[...] = a
    dt, n = move_plan(out)
    call(c, "broadcast", name, ptr(out), n, dt, root, list(out.shape))
    return out


def gather_descriptions(c, what, a, extra=(), name=""):
    """Every rank's description of a (kolo/descriptions.py); the same error on
    every rank when dtypes or shapes beyond dim 0 differ."""
    mine = np.array(descriptions.describe(_DTYPE_INDEX[a.dtype], a.shape, extra), dtype=np.int64)
    table = np.empty((c.size(), mine.size), dtype=np.int64)
    call(c, "allgather", name, ptr(mine), ptr(table), mine.size, _C.I64)
    return descriptions.check_rows(what, table.tolist(), lambda i: _INDEX_DTYPE[i])


def _row_units(a):
    """(dtype code, elements of that code per row of dim 0) that move a's rows
    unchanged."""
    per_row = int(np.prod(a.shape[1:], dtype=np.int64))
    if a.dtype not in _NATIVE:
        per_row *= a.dtype.itemsize
    return _NATIVE.get(a.dtype, _C.U8), per_row


def _data(name):
    return name + ".data" if name else ""


def allgather(c, what, a, name=""):
    """Concatenation of every rank's a along dim 0 (first dims may differ)."""
    a = _contiguous(a.reshape(1) if a.ndim == 0 else a)
    rows = gather_descriptions(c, what, a, name=name)
    firsts = [row[2] for row in rows]
    out = empty((sum(firsts),) + a.shape[1:], a.dtype)
    dt, per_row = _row_units(a)
    call(c, "allgatherv", _data(name), ptr(a), ptr(out), [f * per_row for f in firsts], dt)
    return out


def alltoall(c, what, a, splits, name=""):
    """Rows splits[j] of a go to rank j; returns (received rows, received splits int32).

    Every rank's splits travel in one allgather (with the shape check), so
    each rank knows what it receives; then kolo's alltoallv moves the rows."""
    n, me = c.size(), c.rank()
    a = _contiguous(a.reshape(1) if a.ndim == 0 else a)
    s = split_rows(what, a.shape[0], splits, n)
    rows = gather_descriptions(c, what, a, s, name)
    recv = [descriptions.extra_of(rows[src])[me] for src in range(n)]
    out = empty((sum(recv),) + a.shape[1:], a.dtype)
    dt, per_row = _row_units(a)
    call(c, "alltoallv", _data(name), ptr(a), [r * per_row for r in s], [], ptr(out),
          [r * per_row for r in recv], [], dt)
    return out, np.array(recv, dtype=np.int32)


def reducescatter_rows(d0, n):
    """Horovod's split of the first dimension: lower ranks get the remainder."""
    return [d0 // n + (1 if r < d0 % n else 0) for r in range(n)]


def reducescatter(c, what, a, code, prescale=1.0, postscale=1.0, name=""):
    """Reduces over ranks and keeps this rank's rows of dim 0."""
    if a.ndim == 0:
        raise ValueError(error(what, "needs a tensor with at least one dimension"))
    n, me = c.size(), c.rank()
    wide, dt, kcode = reduce_plan(what, a.dtype, code)
    int_average = kcode == _C.AVERAGE and not _is_float(a.dtype)
    if int_average:
        kcode = _C.SUM
    src = scale(what, a, prescale, "prescale_factor")
    src = src.astype(wide) if wide is not None else src
    split = reducescatter_rows(a.shape[0], n)
    big, tail = split[0], a.shape[1:]
    padded = np.zeros((n * big,) + tail, dtype=src.dtype)  # equal blocks: each padded to the biggest
    offsets = np.cumsum([0] + split)
    for r in range(n):
        padded[r * big:r * big + split[r]] = src[offsets[r]:offsets[r + 1]]
    out = np.empty((big,) + tail, dtype=src.dtype)
    per_row = int(np.prod(tail, dtype=np.int64))
    call(c, "reduce_scatter", name, ptr(padded), ptr(out), big * per_row, dt, kcode, list(a.shape))
    res = out[:split[me]]
    if res.dtype != a.dtype:
        res = res.astype(a.dtype)
    if int_average:
        res = res // n
    return _contiguous(scale(what, res, postscale, "postscale_factor"))
