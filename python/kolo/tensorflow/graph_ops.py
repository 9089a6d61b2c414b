"""How a kolo collective runs inside a TensorFlow graph: NumPy code in a
stateful tf.numpy_function, its errors as TF's classes (errors.py).

The numpy_function runs the collective and returns its results, and beside
them a status read by a KoloStatus op that fails with TF's
FailedPreconditionError when kolo refused the collective; the results are
read after it.

The numpy_function holds one of TensorFlow's inter-op threads while it
waits for its peers (Horovod's asynchronous kernels do not; TF's C kernel
API has asynchronous kernels, but their done-callback is valid only until
the compute function returns, so none can finish later; and polling from
the graph, a tf.while_loop of short waits, does not free the thread: TF's
executor runs the next iteration on the same thread, ahead of other ops).
So kolo ops of one graph run one at a time (bridge.py).
"""
import numpy as np
import tensorflow as tf

from kolo import _C
from kolo.tensorflow import errors, ndarrays


def _placeholder(dtype):
    return ndarrays.aligned(np.zeros((), dtype.as_numpy_dtype))


def _results(call, arrays, touts, checked):
    """call(*arrays)'s results and a status 0, or placeholders and the number
    of kolo's error (errors.hold) when kolo refused it."""
    try:
        outs = [ndarrays.aligned(o) for o in call(*arrays)]
    except _C.Error as e:
        if not checked:
            raise
        return [_placeholder(t) for t in touts] + [np.array(errors.hold(errors.FAILED_PRECONDITION, str(e)),
                                                            np.int32)]
    return outs + [np.zeros((), np.int32)]


def numpy_function(call, inputs, touts, node_name, after=None):
    """call(*arrays) as a stateful numpy_function named node_name (run after
    the op `after`); returns (its results, the op that ends it)."""
    touts, checked = list(touts), errors.available()
    with tf.control_dependencies([after] if after is not None else []):
        outs = tf.numpy_function(lambda *a: _results(call, a, touts, checked), list(inputs),
                                 touts + [tf.int32], stateful=True, name=node_name)
    *outs, status = outs if isinstance(outs, (list, tuple)) else [outs]
    if not checked:
        return list(outs), status.op
    done = errors.status_op(status)
    with tf.control_dependencies([done]):
        return [tf.identity(o) for o in outs], done
