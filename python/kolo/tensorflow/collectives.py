"""Horovod's TensorFlow collectives on kolo: allreduce, grouped_allreduce,
allgather, grouped_allgather, broadcast, broadcast_, alltoall, reducescatter,
grouped_reducescatter, barrier — eagerly and inside tf.function (bridge.py).

The floating ones are differentiable through tf.custom_gradient, with
Horovod's gradients (as kolo.torch's, kolo/torch/autograd.py):
  allreduce(x, op)     -> allreduce(grad, op) with the same scale factors
  allgather(x)         -> this rank's rows of allreduce(grad, Average)
  broadcast(x, root)   -> allreduce(grad, Average) on root, zeros elsewhere
  alltoall(x, splits)  -> alltoall(grad, received_splits)
  reducescatter(x, op) -> allgather(grad) * prescale * postscale (* size for Sum)
Min/Max/Product have no gradient (an error names them).

``name`` makes a collective a named operation, negotiated as Horovod's are:
ranks may issue it in any order, and a second one with a name still in
flight is an error (ValueError). Unnamed ones are matched by call order.
In a graph kolo ops run one at a time (bridge.py). Horovod's grouped calls are one operation each; their members are named
name.0, name.1, ... ``device_dense``/``device_sparse``/``ignore_name_scope``
are accepted and ignored (kolo runs on the CPU).
"""
import numpy as np
import tensorflow as tf

from kolo import _C
from kolo.basics import error, rank
from kolo.process_sets import global_process_set
from kolo.reduce_ops import Average, op_code, resolve_op
from kolo.tensorflow import bridge, ndarrays
from kolo.tensorflow.compression import Compression


def _name_next(name):
    if name and _C.timeline_on():
        _C.timeline_name_next(str(name))


try:  # TF has no public question for "is a tape recording?"; guarded, any doubt: record
    from tensorflow.python.eager import record as _record
except ImportError:  # pragma: no cover - another TF layout
    _record = None


def _recording():
    """Whether a gradient tape may record this eager call. tf.custom_gradient
    costs ~1 ms per eager call (measured, TF 2.21), ten times the collective,
    so it is skipped when no tape is active."""
    return _record is None or _record.could_possibly_record()


def _differentiable(forward, backward, x):
    """forward(x) with gradient backward(dy), for floating x (others: no gradient)."""
    if not x.dtype.is_floating or (tf.executing_eagerly() and not _recording()):
        return forward(x)

    @tf.custom_gradient
    def f(x):
        def grad(dy):
            return backward(tf.convert_to_tensor(dy))
        return forward(x), grad
    return f(x)


def _grad_code(what, code):
    if code not in (_C.SUM, _C.AVERAGE):
        raise RuntimeError(error(what, f"op {_C.op_name(code)} has no gradient (only Sum and "
                                 "Average do)"))
    return code


# ---- allreduce ---------------------------------------------------------------------
def _allreduce_dense(what, t, code, pre, post, ps, name=None):
    bridge.comm(ps, what)  # an unregistered set or a non-member fails here, at the call

    def fn(key, a):
        _name_next(name)
        return [ndarrays.allreduce(bridge.comm(ps, what), what, a, code, pre, post, key)]
    out, = bridge.run_named(what, "allreduce", name, fn, [t], [t.dtype])
    bridge.set_shape(out, t.shape)
    return out


def _sparse_allreduce(what, slices, code, pre, post, ps, name):
    """Horovod's IndexedSlices allreduce: allgathers of values and indices;
    Average divides the values by the set's size (``/``: integer values
    become floating, as in Horovod)."""
    if code not in (_C.SUM, _C.AVERAGE):
        raise NotImplementedError(error(what, f"op {_C.op_name(code)} is not supported for "
                                        "tf.IndexedSlices (Sum or Average; or sparse_as_dense=True)"))
    if pre != 1.0 or post != 1.0:
        raise NotImplementedError(error(what, "prescale_factor/postscale_factor are not supported "
                                        "for tf.IndexedSlices"))
    values, indices = grouped_allgather([slices.values, slices.indices], name=name, process_set=ps)
    if code == _C.AVERAGE:
        values = values / tf.cast(bridge.size_tensor(ps, what), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """The reduction of tensor over all ranks of process_set (default: Average).

    A tf.IndexedSlices is allgathered (values and indices), as in Horovod."""
    what = "allreduce"
    op = resolve_op(what, average, op)
    code = op_code(what, op)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(what, tensor, code, prescale_factor, postscale_factor,
                                 process_set, name)
    t = bridge.check(what, tensor, name)
    sent, ctx = (compression or Compression.none).compress(t)

    def forward(x):
        return _allreduce_dense(what, x, code, prescale_factor, postscale_factor, process_set, name)

    def backward(dy):
        return _allreduce_dense("allreduce backward", dy, _grad_code("allreduce backward", code),
                                prescale_factor, postscale_factor, process_set)
    return (compression or Compression.none).decompress(_differentiable(forward, backward, sent), ctx)


def _member(key, i):
    """A grouped call's i-th operation: its own name (one name in flight once)."""
    return f"{key}.{i}" if key else ""


def _grouped_allreduce_dense(what, ts, code, pre, post, ps, name=None):
    bridge.comm(ps, what)

    def fn(key, *arrays):
        c = bridge.comm(ps, what)
        return [ndarrays.allreduce(c, what, a, code, pre, post, _member(key, i))
                for i, a in enumerate(arrays)]
    outs = bridge.run_named(what, "grouped_allreduce", name, fn, ts, [t.dtype for t in ts])
    for o, t in zip(outs, ts):
        bridge.set_shape(o, t.shape)
    return outs


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """allreduce of each tensor of a list, in one call (one tf.numpy_function
    in a graph); differentiable as a whole."""
    what = "grouped_allreduce"
    op = resolve_op(what, average, op)
    code = op_code(what, op)
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        # Horovod: the dense ones reduced together, then the sparse ones, in order
        dense = [t for t in tensors if not isinstance(t, tf.IndexedSlices)]
        reduced = iter(grouped_allreduce(dense, op=op, compression=compression,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor,
                                         process_set=process_set, name=name) if dense else [])
        sparse = {i: allreduce(t, op=op, prescale_factor=prescale_factor,
                               postscale_factor=postscale_factor, process_set=process_set,
                               name=None if name is None else f"{name}.sparse.{i}")
                  for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)}
        return [sparse[i] if i in sparse else next(reduced) for i in range(len(tensors))]
    compression = compression or Compression.none
    ts = [bridge.check(what, t) for t in tensors]
    if not ts:
        return []
    sent = [compression.compress(t) for t in ts]
    xs = [s for s, _ in sent]
    if not all(x.dtype.is_floating for x in xs) or (tf.executing_eagerly() and not _recording()):
        outs = _grouped_allreduce_dense(what, xs, code, prescale_factor, postscale_factor, process_set,
                                        name)
    else:
        @tf.custom_gradient
        def f(*xs):
            def grad(*dys):
                return _grouped_allreduce_dense(
                    "grouped_allreduce backward", [tf.convert_to_tensor(d) for d in dys],
                    _grad_code("grouped_allreduce backward", code), prescale_factor,
                    postscale_factor, process_set)
            return _grouped_allreduce_dense(what, list(xs), code, prescale_factor,
                                            postscale_factor, process_set, name), grad
        outs = f(*xs)
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, sent)]


# ---- allgather ---------------------------------------------------------------------
def _gathered_shape(t):
    return [None] + t.shape[1:] if t.shape.rank else [None]


def _allgather_plain(what, t, ps, name=None):
    bridge.comm(ps, what)

    def fn(key, a):
        _name_next(name)
        return [ndarrays.allgather(bridge.comm(ps, what), what, a, key)]
    out, = bridge.run_named(what, "allgather", name, fn, [t], [t.dtype])
    bridge.set_shape(out, _gathered_shape(t))
    return out


def _allgather_backward(dy, x, ps):
    """This rank's rows of allreduce(dy, Average)."""
    what = "allgather backward"
    rows = tf.shape(x, out_type=tf.int64)[:1] if x.shape.rank != 0 else tf.ones([1], tf.int64)

    def fn(key, g, mine):
        c = bridge.comm(ps, what)
        summed = ndarrays.allreduce(c, what, g, _C.AVERAGE, name=key)
        every = ndarrays.allgather(c, what, mine, _member(key, "rows"))
        offset = int(every[:c.rank()].sum())
        return [summed[offset:offset + int(mine[0])]]
    out, = bridge.run_named(what, "allgather_grad", None, fn, [dy, rows], [dy.dtype])
    return tf.reshape(out, tf.shape(x))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenation over ranks along dim 0 (first dimensions may differ)."""
    what = "allgather"
    t = bridge.check(what, tensor, name)
    return _differentiable(lambda x: _allgather_plain(what, x, process_set, name),
                           lambda dy: _allgather_backward(dy, t, process_set), t)


def _grouped_allgather_plain(what, ts, ps, name):
    bridge.comm(ps, what)

    def fn(key, *arrays):
        c = bridge.comm(ps, what)
        return [ndarrays.allgather(c, what, a, _member(key, i)) for i, a in enumerate(arrays)]
    outs = bridge.run_named(what, "grouped_allgather", name, fn, ts, [t.dtype for t in ts])
    for o, t in zip(outs, ts):
        bridge.set_shape(o, _gathered_shape(t))
    return outs


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """allgather of each tensor of a list, in one call (one op in a graph);
    the floating ones differentiable, each as allgather's."""
    what = "grouped_allgather"
    ts = [bridge.check(what, t, name) for t in tensors]
    if not ts:
        return []
    if not any(t.dtype.is_floating for t in ts) or (tf.executing_eagerly() and not _recording()):
        return _grouped_allgather_plain(what, ts, process_set, name)

    @tf.custom_gradient
    def f(*xs):
        def grad(*dys):
            return [_allgather_backward(tf.convert_to_tensor(d), x, process_set)
                    if x.dtype.is_floating else None for d, x in zip(dys, ts)]
        return _grouped_allgather_plain(what, list(xs), process_set, name), grad
    return f(*ts)


# ---- broadcast ---------------------------------------------------------------------
def _broadcast_plain(what, t, root_rank, ps, name=None):
    bridge.comm(ps, what)
    root = bridge.root_of(ps, root_rank, what)

    def fn(key, a):
        _name_next(name)
        return [ndarrays.broadcast(bridge.comm(ps, what), what, a, root, key)]
    out, = bridge.run_named(what, "broadcast", name, fn, [t], [t.dtype])
    bridge.set_shape(out, t.shape)
    return out


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """root_rank's tensor (root_rank: a global rank, also in a process set)."""
    what = "broadcast"
    t = bridge.check(what, tensor, name)

    def backward(dy):
        # The zeros are made in the same callback as the allreduce: a TF1 session
        # runs only what its fetches need, and tf.zeros_like(g) needs only g's shape.
        is_root = rank() == int(root_rank)
        bridge.comm(process_set, "broadcast backward")

        def fn(key, g):
            out = ndarrays.allreduce(bridge.comm(process_set, "broadcast backward"),
                                     "broadcast backward", g, _C.AVERAGE, name=key)
            return [out if is_root else np.zeros_like(out)]
        g, = bridge.run_named("broadcast backward", "broadcast_grad", None, fn, [dy], [dy.dtype])
        bridge.set_shape(g, dy.shape)
        return g
    return _differentiable(lambda x: _broadcast_plain(what, x, root_rank, process_set, name),
                           backward, t)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns root_rank's values to variables, in place; returns the
    assignments (in a TF1 graph, running them assigns)."""
    return [v.assign(_broadcast_plain("broadcast_", bridge.check("broadcast_", v), root_rank,
                                      process_set, name)) for v in variables]


# ---- alltoall ----------------------------------------------------------------------
def _alltoall_plain(what, t, splits, ps, name=None):
    bridge.comm(ps, what)
    inputs = [t] if splits is None else [t, tf.convert_to_tensor(splits)]

    def fn(key, a, s=None):
        _name_next(name)
        return list(ndarrays.alltoall(bridge.comm(ps, what), what, a, s, key))
    out, received = bridge.run_named(what, "alltoall", name, fn, inputs, [t.dtype, tf.int32])
    bridge.set_shape(out, [None] + t.shape[1:] if t.shape.rank else [None])
    bridge.set_shape(received, [None])
    return out, received


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Rows splits[j] go to rank j (equal parts when splits is None). Returns
    the received rows; with splits given, (output, received_splits)."""
    what = "alltoall"
    t = bridge.check(what, tensor, name)
    if splits is not None and isinstance(splits, (list, tuple)):
        splits = tf.constant(splits, dtype=tf.int32) if splits else tf.zeros([0], tf.int32)
    holder = {}

    def forward(x):
        out, received = _alltoall_plain(what, x, splits, process_set, name)
        holder["received"] = received
        return out

    def backward(dy):
        g, _ = _alltoall_plain("alltoall backward", dy, holder["received"], process_set)
        return tf.reshape(g, tf.shape(t))
    out = _differentiable(forward, backward, t)
    return out if splits is None else (out, holder["received"])


# ---- reducescatter -----------------------------------------------------------------
def _reducescatter_plain(what, t, code, pre, post, ps, name=None):
    bridge.comm(ps, what)

    def fn(key, a):
        _name_next(name)
        return [ndarrays.reducescatter(bridge.comm(ps, what), what, a, code, pre, post, key)]
    out, = bridge.run_named(what, "reducescatter", name, fn, [t], [t.dtype])
    bridge.set_shape(out, [None] + t.shape[1:] if t.shape.rank else None)
    return out


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces over ranks and keeps this rank's rows of dim 0 (lower ranks get
    the remainder when it does not divide)."""
    what = "reducescatter"
    code = op_code(what, op)
    compression = compression or Compression.none
    t = bridge.check(what, tensor, name)
    sent, ctx = compression.compress(t)

    def backward(dy):
        _grad_code("reducescatter backward", code)
        return _reducescatter_grad(_allgather_plain("reducescatter backward", dy, process_set), code,
                                   prescale_factor, postscale_factor, process_set)
    out = _differentiable(
        lambda x: _reducescatter_plain(what, x, code, prescale_factor, postscale_factor,
                                       process_set, name), backward, sent)
    return compression.decompress(out, ctx)


def _reducescatter_grad(g, code, pre, post, ps):
    """reducescatter's gradient, from the allgathered dy: scaled as the forward."""
    scale = pre * post
    if code != _C.SUM:
        return g * tf.cast(scale, g.dtype) if scale != 1 else g
    n = tf.cast(bridge.size_tensor(ps, "reducescatter backward"), tf.float64)
    return g * tf.cast(n * scale, g.dtype)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          name=None, process_set=global_process_set, ignore_name_scope=False,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of each tensor of a list, in one call (one op in a graph)."""
    what = "grouped_reducescatter"
    code = op_code(what, op)
    compression = compression or Compression.none
    ts = [bridge.check(what, t, name) for t in tensors]
    if not ts:
        return []
    sent = [compression.compress(t) for t in ts]
    bridge.comm(process_set, what)

    def plain(xs):
        def fn(key, *arrays):
            c = bridge.comm(process_set, what)
            return [ndarrays.reducescatter(c, what, a, code, prescale_factor, postscale_factor,
                                           _member(key, i)) for i, a in enumerate(arrays)]
        outs = bridge.run_named(what, "grouped_reducescatter", name, fn, xs, [x.dtype for x in xs])
        for o, x in zip(outs, xs):
            bridge.set_shape(o, [None] + x.shape[1:] if x.shape.rank else None)
        return outs
    xs = [x for x, _ in sent]
    if not all(x.dtype.is_floating for x in xs) or (tf.executing_eagerly() and not _recording()):
        outs = plain(xs)
    else:
        @tf.custom_gradient
        def f(*xs):
            def grad(*dys):
                _grad_code("grouped_reducescatter backward", code)
                gs = _grouped_allgather_plain("grouped_reducescatter backward",
                                              [tf.convert_to_tensor(d) for d in dys], process_set, None)
                return [_reducescatter_grad(g, code, prescale_factor, postscale_factor, process_set)
                        for g in gs]
            return plain(list(xs)), grad
        outs = f(*xs)
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, sent)]


def barrier(process_set=global_process_set):
    """Waits until every rank of process_set calls it (eagerly or in a graph)."""
    bridge.comm(process_set, "barrier")

    def fn():
        bridge.comm(process_set, "barrier").barrier()
        return []
    bridge.run("barrier", fn, [], [])

