"""How tf.Tensors reach kolo._C without linking TensorFlow, eagerly and in graphs.

Eagerly, a CPU EagerTensor's buffer is read in place: ``np.asarray(t)`` is a
read-only view of it (EagerTensor.__array__, no copy; kolo only reads
inputs), and a result array becomes a tf.Tensor through DLPack
(``tf.experimental.dlpack.from_dlpack``, no copy either; measured in
bench/tensorflow). In a graph the same NumPy code runs in a stateful
``tf.numpy_function``. XLA cannot compile a Python callback: a function with
``jit_compile=True`` gets a clear error at trace time.

Which collectives match how (kolo.h): a collective given ``name=`` is a
named operation, negotiated as Horovod's are (a second one with that name in
flight is an error); an unnamed one is matched by call order. In a graph a
kolo op is a tf.numpy_function that holds one of TF's inter-op threads while
it waits for its peers (graph_ops.py), so kolo ops of a graph run one at a
time: a tf.function runs its stateful ops in program order, and in a TF1
graph (tf.compat.v1, sessions), whose independent ops a session runs at once
and in any order, each kolo op waits for the one created before it. Without
that chain a session.run of more collectives than inter-op threads can take
every thread of one rank with collectives its peers, their threads taken by
others, never start (Horovod's own test_tensorflow.py does so: 30 allgathers
in one run). So ranks must build a TF1 graph's collectives in one order, as
Horovod's graph ops (named by their nodes) need too.
"""
import re
import weakref

import ml_dtypes
import numpy as np
import tensorflow as tf

from kolo import process_sets
from kolo.basics import error
from kolo.names import operation_key
from kolo.tensorflow import errors, graph_ops, ndarrays

_BF16 = np.dtype(ml_dtypes.bfloat16)


_checked = {}  # tf.DType -> supported? (the test below costs microseconds per call)


def check(what, tensor, name=None):
    """tensor as a tf.Tensor of a dtype kolo handles; a clear error otherwise."""
    label = f" '{name}'" if name else ""
    if isinstance(tensor, tf.IndexedSlices):
        raise TypeError(error(what, f"tensor{label} is a tf.IndexedSlices; this collective "
                              "needs a dense tensor (tf.convert_to_tensor)"))
    t = tensor
    if not isinstance(t, tf.Tensor):
        try:
            t = tf.convert_to_tensor(tensor)
        except (TypeError, ValueError) as e:
            raise TypeError(error(what, f"expected a tf.Tensor{label}, got {type(tensor).__name__} "
                                  f"({e})")) from None
    ok = _checked.get(t.dtype)
    if ok is None:
        ok = _checked[t.dtype] = (t.dtype.is_numpy_compatible and
                                  ndarrays.supported(t.dtype.as_numpy_dtype))
    if not ok:
        raise TypeError(error(what, f"tensor{label} has dtype {t.dtype.name}, which kolo does not "
                              f"support (supported: {ndarrays.SUPPORTED})"))
    return t


def set_shape(t, shape):
    """Tells a graph tensor the shape it will have (eager tensors know theirs;
    set_shape costs tens of microseconds on them)."""
    if not tf.executing_eagerly():
        t.set_shape(shape)


def comm(process_set, what):
    """The communicator of process_set (None or global_process_set: all ranks)."""
    return process_sets.communicator(process_set, what)


def size_tensor(process_set, what):
    """The set's size as an int32 tensor read when it runs: in a traced
    function a Python int would be baked in, and an elastic job's size
    changes between runs of one traced step."""
    if tf.executing_eagerly():
        return tf.constant(comm(process_set, what).size(), tf.int32)
    return tf.numpy_function(lambda: np.array(comm(process_set, what).size(), np.int32), [], tf.int32,
                             stateful=True, name="kolo_size")


def root_of(process_set, root_rank, what):
    """Horovod's root_rank is a global rank; kolo's is the set's."""
    if process_set is None or process_set is process_sets.global_process_set:
        return int(root_rank)
    try:
        return process_set.ranks.index(int(root_rank))
    except ValueError:
        raise ValueError(error(what, f"root_rank {root_rank} is not a member of the process set "
                               f"(ranks {process_set.ranks})")) from None


def to_array(t):
    return np.asarray(t)


def to_tensor(a):
    """A tf.Tensor over a's buffer (DLPack); bfloat16 travels as its bits."""
    a = ndarrays.aligned(a)
    if a.dtype == _BF16:
        return tf.bitcast(to_tensor(a.view(np.uint16)), tf.bfloat16)
    if a.size == 0:
        return tf.constant(a)
    return tf.experimental.dlpack.from_dlpack(a.__dlpack__())


def _refuse_xla(what):
    try:  # the only way to ask; not public API, so guarded
        from tensorflow.python.ops import control_flow_util
        in_xla = control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
    except Exception:  # pragma: no cover - a TF without it: XLA's own error follows
        return
    if in_xla:
        raise NotImplementedError(error(what, "kolo's collectives cannot run inside an XLA-compiled "
                                        "function (jit_compile=True): call them outside it, or "
                                        "compile without jit_compile"))


def _node_name(name, what):
    """A valid TF node name from the caller's name (TF makes it unique in its graph)."""
    base = str(name) if name not in (None, "") else "kolo_" + what.replace(" ", "_")
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", base)
    return base if re.match(r"[A-Za-z0-9.]", base) else "kolo_" + base


def run_named(what, kind, name, fn, inputs, touts):
    """fn(key, *arrays) -> list of arrays, on tf.Tensors, where key is the
    engine's name of the operation (kolo/names.py: from kind and `name`; ""
    when unnamed, matched by call order; a fn of several collectives names
    them key + a suffix). Returns a list of tf.Tensors (shapes in a graph are
    unknown: the caller sets what it knows)."""
    key = operation_key(kind, name)
    if tf.executing_eagerly():
        return [to_tensor(o) for o in errors.eager(lambda *a: fn(key, *a), [to_array(t) for t in inputs])]
    return _in_graph(what, lambda *a: fn(key, *a), inputs, touts, _node_name(name, what))


def run(what, fn, inputs, touts):
    """fn(*arrays) -> list of arrays, matched by call order (run_named, unnamed)."""
    return run_named(what, None, None, lambda _key, *a: fn(*a), inputs, touts)


# Each kolo op of a TF1 graph waits for the one created before it (module docstring).
_last_op = weakref.WeakKeyDictionary()


def _in_graph(what, call, inputs, touts, node_name):
    _refuse_xla(what)
    if tf.inside_function():  # program order already
        return graph_ops.numpy_function(call, inputs, touts, node_name)[0]
    graph = tf.compat.v1.get_default_graph()
    outs, last = graph_ops.numpy_function(call, inputs, touts, node_name, _last_op.get(graph))
    _last_op[graph] = last
    return outs
