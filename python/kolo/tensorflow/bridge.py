"""How tf.Tensors reach kolo._C without linking TensorFlow, eagerly and in graphs.

Eagerly, a CPU EagerTensor's buffer is read in place: ``np.asarray(t)`` is a
read-only view of it (EagerTensor.__array__, no copy; kolo only reads
inputs), and a result array becomes a tf.Tensor through DLPack
(``tf.experimental.dlpack.from_dlpack``, no copy either; measured in
bench/tensorflow). Inside a ``tf.function`` the same NumPy code runs in a
``tf.numpy_function`` (stateful, so TF neither prunes nor reorders it against
other kolo calls); kolo matches collectives by call order, so a graph must
issue them in one order on every rank — TF runs stateful ops of one function
in program order. XLA cannot compile a Python callback: a function with
``jit_compile=True`` gets a clear error at trace time.
"""
import weakref

import ml_dtypes
import numpy as np
import tensorflow as tf

from kolo import _C, process_sets
from kolo.basics import error
from kolo.tensorflow import ndarrays

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


class InvalidArgumentError(tf.errors.InvalidArgumentError, ValueError):
    """A bad argument found while the collective runs (splits that do not fit,
    a root outside the set): TF's error class, as Horovod raises, and a
    ValueError. Inside a tf.function TF's py_func maps ValueError to the same."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class FailedPreconditionError(tf.errors.FailedPreconditionError, _C.Error):
    """A collective kolo refused or lost (ranks that disagree, a dead peer):
    TF's error class, as Horovod raises eagerly, and kolo's (kolo.KoloError).
    Inside a tf.function TF reports it as an UnknownError carrying this text
    (its py_func maps only a few Python classes)."""

    def __init__(self, message):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)


def _eager(fn, arrays):
    try:
        return fn(*arrays)
    except _C.Error as e:
        raise FailedPreconditionError(str(e)) from None
    except ValueError as e:
        raise InvalidArgumentError(str(e)) from None


# TF1-style graphs (tf.compat.v1, sessions) run independent ops in any order,
# and kolo matches collectives by order: each kolo op of a graph waits for the
# one created before it, so every rank runs them in creation order. (A
# tf.function orders its stateful ops by itself; the chain changes nothing.)
_last_op = weakref.WeakKeyDictionary()


def run(what, fn, inputs, touts):
    """fn(*arrays) -> list of arrays, on tf.Tensors: directly when eager, as a
    tf.numpy_function in a graph. Returns a list of tf.Tensors (shapes in a
    graph are unknown: the caller sets what it knows)."""
    if tf.executing_eagerly():
        return [to_tensor(o) for o in _eager(fn, [to_array(t) for t in inputs])]
    _refuse_xla(what)
    touts = list(touts)
    none = not touts  # a numpy_function without outputs has no op to chain on: one dummy output

    def call(*arrays):
        outs = [ndarrays.aligned(o) for o in fn(*arrays)]
        return [np.zeros((), np.int32)] if none else outs
    graph = tf.compat.v1.get_default_graph()
    before = _last_op.get(graph)
    with tf.control_dependencies([before] if before is not None else []):
        outs = tf.numpy_function(call, list(inputs), [tf.int32] if none else touts, stateful=True,
                                 name="kolo_" + what.replace(" ", "_"))
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    _last_op[graph] = outs[0].op
    return [] if none else list(outs)
