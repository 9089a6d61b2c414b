"""kolo.tensorflow's errors: a call that differs between ranks raises on
every rank (eagerly and in tf.function) and leaves the communicator usable
(shared memory); bad input is a clear error naming the problem and the
rank. Run under kolorun -np 2 (or more)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from tfcommon import check, done, same  # noqa: E402

import tensorflow as tf  # noqa: E402

import kolo.tensorflow as hvd  # noqa: E402


def raises(fn, kinds, *needles):
    """fn() raises one of kinds with every needle in its text; returns the text."""
    try:
        fn()
    except kinds as e:
        text = str(e)
        check(all(n in text for n in needles), f"error text lacks {needles}: {text}")
        return text
    check(False, f"no error raised (expected {kinds} with {needles})")


raises(lambda: hvd.allreduce(tf.ones([2])), ValueError, "not been initialized")
hvd.init()
R, N = hvd.rank(), hvd.size()
me = f"kolo rank {R}"

# A rank whose call differs: every rank gets kolo's error, nobody hangs.
raises(lambda: hvd.allreduce(tf.ones([3 + R])), hvd.KoloError, me)
raises(lambda: hvd.allreduce(tf.ones([3]), op=hvd.Sum if R == 0 else hvd.Max), hvd.KoloError, me)
check(same(hvd.allreduce(tf.ones([2]), op=hvd.Sum), [float(N)] * 2, tf.float32),
      "usable after a mismatch")
raises(lambda: hvd.allgather(tf.ones([1, 2 + R])), hvd.KoloError, me, "shape beyond the first")
raises(lambda: hvd.allgather(tf.ones([1, 2], tf.float32 if R == 0 else tf.float64)),
       hvd.KoloError, me, "ranks disagree on the dtype")
# In a graph too the error is TF's FailedPreconditionError (as Horovod's),
# holding kolo's text: in a tf.function and in a TF1 session.
graph = tf.function(lambda x: hvd.allreduce(x))
raises(lambda: graph(tf.ones([3 + R])), tf.errors.FailedPreconditionError, me)
check(same(graph(tf.ones([3])), [1.0] * 3, tf.float32), "usable after a mismatch in a graph")
# (A graph of its own each: a TF1 graph's kolo ops run in creation order, so
# running one runs those created before it.)
with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    bad = hvd.allgather(tf.ones([1, 2], tf.float32 if R == 0 else tf.float64))
    raises(lambda: sess.run(bad), tf.errors.FailedPreconditionError, me, "ranks disagree on the dtype")
with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    bad = hvd.alltoall(tf.ones([2 * N + 1]))
    raises(lambda: sess.run(bad), tf.errors.InvalidArgumentError, me, "not divisible")
with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    check(sess.run(hvd.allreduce(tf.ones([2]), op=hvd.Sum)).tolist() == [float(N)] * 2,
          "usable after a mismatch in a TF1 session")

# Input errors name the problem (and are the same everywhere: no collective ran).
for dtype in (tf.uint32, tf.uint64, tf.complex64, tf.string):
    raises(lambda: hvd.allreduce(tf.zeros([2], dtype)), TypeError, me, f"dtype {dtype.name}",
           "not support")
    def traced():
        return hvd.allgather(tf.zeros([2], dtype))
    raises(tf.function(traced), TypeError, f"dtype {dtype.name}")
raises(lambda: hvd.allreduce(tf.ones([2]), op=hvd.Adasum), NotImplementedError, "Adasum")
raises(lambda: hvd.allreduce(tf.ones([2], tf.bool), op=hvd.Average), TypeError,
       "Average is not defined for bool")
raises(lambda: hvd.alltoall(tf.ones([2 * N + 1])), ValueError, "not divisible")
raises(lambda: hvd.alltoall(tf.ones([N]), splits=[N] + [0] * (N - 1) + [1]), ValueError,
       f"must hold {N}")
raises(lambda: hvd.reducescatter(tf.constant(1.0)), ValueError, "at least one dimension")
raises(lambda: hvd.allreduce(tf.ones([2]), average=True, op=hvd.Sum), ValueError, "not both")
raises(lambda: tf.function(lambda x: hvd.allreduce(x), jit_compile=True)(tf.ones([2])),
       NotImplementedError, "jit_compile")
raises(lambda: hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Max), ValueError, "Max")
raises(lambda: hvd.broadcast(tf.ones([2]), root_rank=N), hvd.KoloError, me)
check(same(hvd.broadcast(tf.constant([R]), 0), [0], tf.int32), "usable after a bad root")
hvd.shutdown()
done(f"tf-errors rank {R} of {N}")
