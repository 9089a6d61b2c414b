"""Whole-model helpers: broadcast_variables, broadcast_object,
allgather_object, and Horovod's *_op queries (Horovod's names and arguments)."""
import pickle
import zlib

import numpy as np
import tensorflow as tf

from kolo import _C
from kolo.basics import error
from kolo.process_sets import global_process_set
from kolo.tensorflow import bridge, ndarrays


def _check_same_everywhere(c, what, description, key=""):
    """One allgather of a digest of names, shapes and dtypes: a model that
    differs between ranks is the same error on every rank, not a hang."""
    mine = np.array([zlib.crc32(description.encode())], dtype=np.int64)
    every = np.empty(c.size(), dtype=np.int64)
    ndarrays.call(c, "allgather", key, ndarrays.ptr(mine), ndarrays.ptr(every), 1, _C.I64)
    differ = [r for r, d in enumerate(every.tolist()) if d != every[0]]
    if differ:
        raise _C.Error(error(what, "the variables differ between ranks (count, shapes or dtypes): "
                             f"rank{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))} "
                             "differ from rank 0"))


def _broadcast_arrays(c, what, arrays, root, key=""):
    """root's arrays on every rank; one broadcast per dtype (a fused buffer).
    Named (key): the check is key, the broadcasts key.<dtype>."""
    _check_same_everywhere(c, what, ";".join(f"{a.shape}:{a.dtype}" for a in arrays), key)
    out = [None] * len(arrays)
    by_dtype = {}
    for i, a in enumerate(arrays):
        by_dtype.setdefault(a.dtype, []).append(i)
    for dtype, idx in by_dtype.items():
        flat = np.concatenate([arrays[i].reshape(-1) for i in idx])
        dt, n = ndarrays.move_plan(flat)
        ndarrays.call(c, "broadcast", f"{key}.{dtype}" if key else "", ndarrays.ptr(flat), n, dt, root, [])
        off = 0
        for i in idx:
            out[i] = flat[off:off + arrays[i].size].reshape(arrays[i].shape)
            off += arrays[i].size
    return out


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns root_rank's values to every variable (eagerly or in a graph).
    Variables of one dtype travel as one buffer. ``inplace`` is accepted (kolo
    always assigns). In a TF1 graph, returns the op that assigns."""
    what = "broadcast_variables"
    variables = list(variables)
    bridge.comm(process_set, what)
    root = bridge.root_of(process_set, root_rank, what)
    for v in variables:
        bridge.check(what, v, getattr(v, "name", None))
    values = bridge.run_named(what, "broadcast_variables", None,
                              lambda key, *a: _broadcast_arrays(bridge.comm(process_set, what), what,
                                                                list(a), root, key),
                              [tf.convert_to_tensor(v) for v in variables], [v.dtype for v in variables])
    assigns = [v.assign(tf.reshape(x, v.shape)) for v, x in zip(variables, values)]
    # In a TF1 graph the assignments run when the returned op does (sess.run);
    # a tf.function runs them by itself (and could not return an op).
    if not tf.executing_eagerly() and not tf.inside_function():
        return tf.group(*assigns)
    return None


def broadcast_global_variables(root_rank):
    """Horovod's TF1 call: root_rank's values of tf.compat.v1.global_variables(),
    as an op to run in a session. Eagerly there are no global variables: an
    error, as in Horovod (use broadcast_variables(model.variables, root_rank))."""
    if tf.executing_eagerly():
        raise RuntimeError(error("broadcast_global_variables", "does not support eager execution; "
                                 "use broadcast_variables(model.variables, root_rank)"))
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's object (pickled) on every rank. Eager (Python objects)."""
    what = "broadcast_object"
    c = bridge.comm(process_set, what)
    root = bridge.root_of(process_set, root_rank, what)
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if c.rank() == root else b""
    length = np.array([len(payload)], dtype=np.int64)
    c.broadcast(ndarrays.ptr(length), 1, _C.I64, root)
    buf = np.frombuffer(bytearray(payload), np.uint8) if c.rank() == root else \
        np.empty(int(length[0]), np.uint8)
    if buf.size:
        c.broadcast(ndarrays.ptr(buf), buf.size, _C.U8, root)
    return obj if c.rank() == root else pickle.loads(buf.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Horovod's: a function that broadcasts the object given to it."""
    return lambda obj: broadcast_object(obj, root_rank, session, name, process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every rank's object, in rank order."""
    c = bridge.comm(process_set, "allgather_object")
    mine = np.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), np.uint8)
    n = np.array([mine.size], dtype=np.int64)
    sizes = np.empty(c.size(), dtype=np.int64)
    c.allgather(ndarrays.ptr(n), ndarrays.ptr(sizes), 1, _C.I64)
    counts = sizes.tolist()
    out = np.empty(sum(counts), np.uint8)
    c.allgatherv(ndarrays.ptr(mine), ndarrays.ptr(out), counts, _C.U8)
    raw, objs, off = out.tobytes(), [], 0
    for k in counts:
        objs.append(pickle.loads(raw[off:off + k]))
        off += k
    return objs
