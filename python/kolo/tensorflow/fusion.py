"""Gradient reduction for DistributedGradientTape and the DistributedOptimizers,
and join(): an adapter over kolo's reducer (include/kolo/reducer.h,
kolo._C.Reducer), which owns buckets, fusion, scaling and join's vote and
shadow steps for every front.

One step's dense gradients of a floating dtype go to the reducer as NumPy
arrays, which fuses them into buckets of at most the fusion threshold
(KOLO_FUSION_THRESHOLD or Horovod's HOROVOD_FUSION_THRESHOLD; default 64 MiB:
they all arrive at once, so big buckets cost no overlap) — inside one
tf.numpy_function when traced, so a step costs one Python callback whatever
the number of variables. Other dtypes are reduced one by one in the same
callback; tf.IndexedSlices are allgathered after it (or made dense first with
sparse_as_dense).

join(): each step begins with the reducer's vote "1 if this rank is still
stepping"; a rank that called join() answers 0 and shadows the buckets of
its own last step with zeros until every rank has joined. So Sum and Average
stay exact over the ranks that stepped (Average divides by their number).
Buckets are laid out the same way on every rank from the same model, so a
joined rank knows their sizes.
"""
import numpy as np
import tensorflow as tf

from kolo import _C
from kolo.basics import comm_of_world, error
from kolo.reduce_ops import op_code
from kolo.tensorflow import bridge, ndarrays
from kolo.tensorflow.collectives import allreduce
from kolo.tensorflow.compression import Compression

_FLOATS = ndarrays.FLOATS
DEFAULT_FUSION_BYTES = 64 << 20


def fusion_threshold():
    return _C.fusion_threshold(DEFAULT_FUSION_BYTES)


class _State:
    reducer = None  # the last step's kolo._C.Reducer (join() shadows its buckets)
    key = None      # what it was made for: communicator, gradients, op and scales
    rounds = 0      # steps this rank took since the last join()


def _reducer(what, c, arrays, code, prescale, postscale):
    """The reducer for this step's gradients: the last one where they are alike."""
    key = ([(a.size, a.dtype) for a in arrays], code, prescale, postscale)
    if _State.reducer is None or _State.key[0] is not c or _State.key[1:] != key:
        cap = fusion_threshold()
        entries = [(a.size, ndarrays._NATIVE[a.dtype], -1, 0) for a in arrays]
        _State.reducer = _C.Reducer(c, entries, cap, cap, code, prescale=prescale, postscale=postscale,
                                    vote_each_step=True, what=what)
        _State.key = (c,) + key
    return _State.reducer


def _active_ranks(c, me_active):
    flag = np.array([1 if me_active else 0], dtype=np.int32)
    c.allreduce(ndarrays.ptr(flag), ndarrays.ptr(flag), 1, _C.I32, _C.SUM, [])
    return int(flag[0])


def _reduce_arrays(what, c, arrays, code, prescale, postscale):
    """The dense part of one step, on NumPy arrays; returns new arrays."""
    fused = [i for i, a in enumerate(arrays) if a.dtype in _FLOATS]
    ins = [ndarrays._contiguous(arrays[i]) for i in fused]
    r = _reducer(what, c, ins, code, prescale, postscale)
    for k, a in enumerate(ins):
        r.ready(k, ndarrays.ptr(a))
    r.finish()
    _State.rounds += 1
    out = list(arrays)
    for i, a in zip(fused, ins):
        out[i] = ndarrays.empty(a.shape, a.dtype)
    r.results([ndarrays.ptr(out[i]) for i in fused])
    for i, a in enumerate(arrays):
        if a.dtype not in _FLOATS:  # integer "gradients": rare; one call each, and not mirrored by join()
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
    while _active_ranks(c, False):  # the steps' vote, answered 0
        if _State.reducer is None:
            raise RuntimeError(error("join", "other ranks are still reducing gradients, but this "
                                     "rank never did; it cannot know their sizes"))
        _State.reducer.shadow()
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
