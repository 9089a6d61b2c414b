"""DistributedGradientTape: a tf.GradientTape whose gradient() returns the
gradients reduced over all ranks (fusion.py: buckets, one callback a step)."""
import tensorflow as tf

from kolo.basics import error
from kolo.process_sets import global_process_set
from kolo.reduce_ops import Average, Sum, op_code
from kolo.tensorflow import fusion
from kolo.tensorflow.compression import Compression


def scale_factors(what, op, gradient_predivide_factor):
    """Horovod's gradient_predivide_factor f: Average becomes prescale 1/f
    and postscale f (the division by the size stays in the reduction)."""
    if gradient_predivide_factor != 1.0:
        if op_code(what, op) != op_code(what, Average):
            raise ValueError(error(what, "gradient_predivide_factor needs op=Average"))
        return 1.0 / gradient_predivide_factor, gradient_predivide_factor
    return 1.0, 1.0


class _DistributedGradientTape:
    """Wraps a tf.GradientTape (its recording, watch, jacobian... are the
    wrapped tape's); only gradient() differs."""

    def __init__(self, tape, compression, sparse_as_dense, op, gradient_predivide_factor,
                 process_set):
        self._tape = tape
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._pre, self._post = scale_factors("DistributedGradientTape", op,
                                              gradient_predivide_factor)
        self._process_set = process_set

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._tape.gradient(target, sources, output_gradients, unconnected_gradients)
        flat = tf.nest.flatten(grads, expand_composites=False)
        reduced = fusion.reduce_gradients("DistributedGradientTape", flat, self._op,
                                          self._compression, self._sparse_as_dense, self._pre,
                                          self._post, self._process_set)
        return tf.nest.pack_sequence_as(grads, reduced)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Horovod's DistributedGradientTape: ``tape.gradient`` averages (op) the
    gradients over the ranks. ``num_groups``/``groups`` are accepted: kolo
    fuses by size (HOROVOD_FUSION_THRESHOLD) instead."""
    if op_code("DistributedGradientTape", op) not in (op_code("", Average), op_code("", Sum)):
        raise ValueError(error("DistributedGradientTape", f"op {op!r} is not supported for "
                               "gradients (Average or Sum)"))
    return _DistributedGradientTape(gradtape, compression, sparse_as_dense, op,
                                    gradient_predivide_factor, process_set)
