"""Horovod's SyncBatchNormalization for Keras 3: batch statistics over every
rank's batch while training (a Keras BatchNormalization otherwise).

Each rank's (count, count*mean, count*E[x^2]) are summed over the ranks in
one allreduce, so the mean and the (biased, as Keras') variance are those of
the concatenated batch, also when the ranks' batches differ in size (Horovod
averages the ranks' moments with equal weights: the same for equal batches).
The allreduce is differentiable, so gradients flow through the statistics.
"""
import tensorflow as tf
from tensorflow import keras

from kolo.basics import error, size
from kolo.reduce_ops import Sum
from kolo.tensorflow.collectives import allreduce

_WHAT = "SyncBatchNormalization"


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization whose training statistics are the
    whole job's. ``fused`` is Horovod's argument: only False is accepted
    (Keras 3 has no fused kernel to turn off)."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError(error(_WHAT, "does not support fused=True"))
        if not kwargs.get("name"):
            kwargs["name"] = "sync_batch_normalization"
        super().__init__(**kwargs)
        if not callable(getattr(keras.layers.BatchNormalization, "_moments", None)):
            # Keras' hook for the statistics (Horovod overrides it too); a
            # Keras without it would silently normalise per rank.
            raise NotImplementedError(error(_WHAT, f"this Keras ({keras.__version__}) has no "
                                            "BatchNormalization._moments to synchronise"))

    def _moments(self, inputs, mask):
        mean, variance = super()._moments(inputs, mask)
        if size() == 1:
            return mean, variance
        axes = self._reduction_axes
        if mask is None:
            count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)), mean.dtype)
        else:  # the mask covers every axis but the last (Keras' convention)
            weights = tf.broadcast_to(tf.cast(tf.expand_dims(mask, -1), mean.dtype), tf.shape(inputs))
            count = tf.reduce_sum(weights) / tf.cast(
                tf.reduce_prod(tf.gather(tf.shape(inputs), [a for a in range(inputs.shape.rank)
                                                            if a not in axes])), mean.dtype)
        flat_mean, flat_var = tf.reshape(mean, [-1]), tf.reshape(variance, [-1])
        local = tf.concat([tf.reshape(count, [1]), count * flat_mean,
                           count * (flat_var + tf.square(flat_mean))], 0)
        total = allreduce(local, op=Sum, name=None)
        n = tf.size(flat_mean)
        group_mean = total[1:1 + n] / total[0]
        group_var = total[1 + n:] / total[0] - tf.square(group_mean)
        return tf.reshape(group_mean, tf.shape(mean)), tf.reshape(group_var, tf.shape(variance))
