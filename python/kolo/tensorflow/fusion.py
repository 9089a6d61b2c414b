"""Gradient reduction for DistributedGradientTape and the DistributedOptimizers,
and join().

One step's dense gradients go through ONE kolo call per bucket: gradients of
a floating dtype are concatenated into flat buffers of at most
HOROVOD_FUSION_THRESHOLD bytes (default 64 MiB, Horovod's variable), reduced
in place and split back — inside one tf.numpy_function when traced, so a
step costs one Python callback whatever the number of variables. Other
dtypes are reduced one by one in the same callback; tf.IndexedSlices are
allgathered after it (or made dense first with sparse_as_dense).

join(): each step begins with a one-element allreduce of "1 if this rank is
still stepping"; a rank that called join() answers 0 and mirrors the
buckets of its own last step with zeros until every rank has joined. So
Sum and Average stay exact over the ranks that stepped (Average divides by
their number). Buckets are built the same way on every rank from the same
model, so a joined rank knows their sizes.
"""
import os

import numpy as np
import tensorflow as tf

from kolo import _C
from kolo.basics import comm_of_world, error
from kolo.reduce_ops import op_code
from kolo.tensorflow import bridge, ndarrays
from kolo.tensorflow.collectives import allreduce
from kolo.tensorflow.compression import Compression

_FLOATS = ndarrays.FLOATS


def fusion_threshold():
    return int(os.environ.get("HOROVOD_FUSION_THRESHOLD", 64 * 1024 * 1024))


class _State:
    layout = None  # the last step's [(numpy dtype, element count)] per bucket, for join()
    rounds = 0     # steps this rank took since the last join()


def _buckets(arrays, limit):
    """Indices of arrays grouped by dtype (first-appearance order), each group
    cut into buckets of at most limit bytes (a bigger array is a bucket alone)."""
    groups = {}
    for i, a in enumerate(arrays):
        if a.dtype in _FLOATS:
            groups.setdefault(a.dtype, []).append(i)
    out = []
    for idx in groups.values():
        cur, size = [], 0
        for i in idx:
            if cur and size + arrays[i].nbytes > limit:
                out.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += arrays[i].nbytes
        out.append(cur)
    return out


def _active_ranks(c, me_active):
    flag = np.array([1 if me_active else 0], dtype=np.int32)
    c.allreduce(ndarrays.ptr(flag), ndarrays.ptr(flag), 1, _C.I32, _C.SUM, [])
    return int(flag[0])


def _reduce_arrays(what, c, arrays, code, prescale, postscale):
    """The dense part of one step, on NumPy arrays; returns new arrays."""
    active = _active_ranks(c, True)
    _State.rounds += 1
    average = code == _C.AVERAGE
    wire = _C.SUM if average else code  # joined ranks add zeros; Average divides by `active`
    if active != c.size() and code not in (_C.SUM, _C.AVERAGE):
        raise RuntimeError(error(what, f"op {_C.op_name(code)} cannot run while ranks have joined "
                                 "(join() supports Sum and Average)"))
    out = list(arrays)
    buckets = _buckets(arrays, fusion_threshold())
    _State.layout = []
    for b in buckets:
        flat = np.concatenate([arrays[i].reshape(-1) for i in b])
        if prescale != 1.0:
            flat *= flat.dtype.type(prescale)
        ndarrays.allreduce_flat(c, flat, wire)
        _State.layout.append((flat.dtype, flat.size))
        factor = postscale / active if average else postscale
        if factor != 1.0:
            flat = (flat.astype(np.float32) * factor).astype(flat.dtype) if flat.dtype.itemsize < 4 \
                else flat * flat.dtype.type(factor)
        off = 0
        for i in b:
            out[i] = flat[off:off + arrays[i].size].reshape(arrays[i].shape)
            off += arrays[i].size
    fused = {i for b in buckets for i in b}
    for i, a in enumerate(arrays):
        if i not in fused:  # integer "gradients": rare; one call each, and not mirrored by join()
            out[i] = ndarrays.allreduce(c, what, a, code, prescale, postscale)
    return out


def reduce_gradients(what, grads, op, compression=Compression.none, sparse_as_dense=False,
                     prescale=1.0, postscale=1.0, process_set=None):
    """Every rank's gradients reduced with op; None stays None. grads: a list
    of tf.Tensor, tf.IndexedSlices or None (eagerly or in a graph)."""
    code = op_code(what, op)
    compression = compression or Compression.none
    grads = list(grads)
    if sparse_as_dense:
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    dense = [i for i, g in enumerate(grads) if g is not None and not isinstance(g, tf.IndexedSlices)]
    sent = [compression.compress(bridge.check(what, grads[i])) for i in dense]
    xs = [s for s, _ in sent]
    bridge.comm(process_set, what)  # a bad process set fails here, at the call
    outs = bridge.run(what, lambda *a: _reduce_arrays(what, bridge.comm(process_set, what), list(a),
                                                      code, prescale, postscale),
                      xs, [x.dtype for x in xs])
    result = list(grads)
    for i, o, x, (_, ctx) in zip(dense, outs, xs, sent):
        bridge.set_shape(o, x.shape)
        result[i] = compression.decompress(o, ctx)
    for i, g in enumerate(grads):
        if isinstance(g, tf.IndexedSlices):
            result[i] = allreduce(g, op=op, process_set=process_set)
    return result


def _join_arrays():
    """join() on NumPy: mirror the others' steps with zeros until all joined;
    returns the rank that joined last (the one that stepped the most)."""
    c = comm_of_world()
    while _active_ranks(c, False):
        if _State.layout is None:
            raise RuntimeError(error("join", "other ranks are still reducing gradients, but this "
                                     "rank never did; it cannot know their sizes"))
        for dtype, count in _State.layout:
            ndarrays.allreduce_flat(c, np.zeros(count, dtype=dtype), _C.SUM)
    rounds = np.array([_State.rounds], dtype=np.int64)
    every = np.empty(c.size(), dtype=np.int64)
    c.allgather(ndarrays.ptr(rounds), ndarrays.ptr(every), 1, _C.I64)
    _State.rounds = 0
    last = int(np.argmax(every[::-1]))  # the highest rank among those that stepped the most
    return [np.array(c.size() - 1 - last, dtype=np.int32)]


def join():
    """Horovod's join(): this rank has no more data; it takes part in the
    others' gradient reductions with zeros until every rank has joined.
    Returns the rank that joined last (an int32 scalar tensor)."""
    comm_of_world()
    last, = bridge.run("join", _join_arrays, [], [tf.int32])
    bridge.set_shape(last, [])
    return last
