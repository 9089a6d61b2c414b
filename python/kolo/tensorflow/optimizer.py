"""kolo.tensorflow.DistributedOptimizer: a Keras optimizer is wrapped by
kolo.tensorflow.keras (the TF2 way); a TF1-style tf.compat.v1.train.Optimizer
gets a subclass whose compute_gradients returns reduced gradients (the
legacy shape: minimize() and apply_gradients() then work as before)."""
import tensorflow as tf

from kolo.basics import error
from kolo.process_sets import global_process_set
from kolo.reduce_ops import Average
from kolo.tensorflow import fusion
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.gradient_tape import scale_factors


def _legacy(optimizer, compression, sparse_as_dense, op, gradient_predivide_factor, process_set):
    pre, post = scale_factors("DistributedOptimizer", op, gradient_predivide_factor)
    base = optimizer.__class__

    class _Distributed(base):
        def compute_gradients(self, *args, **kwargs):
            pairs = base.compute_gradients(self, *args, **kwargs)
            grads = fusion.reduce_gradients("DistributedOptimizer", [g for g, _ in pairs], op,
                                            compression, sparse_as_dense, pre, post, process_set)
            return list(zip(grads, [v for _, v in pairs]))
    _Distributed.__name__ = "Distributed" + base.__name__
    wrapped = _Distributed.__new__(_Distributed)
    wrapped.__dict__.update(optimizer.__dict__)  # the same hyper-parameters and slots
    return wrapped


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's: the optimizer's gradients are reduced over the ranks before they are applied."""
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if backward_passes_per_step != 1:
            raise NotImplementedError(error("DistributedOptimizer", "backward_passes_per_step > 1 "
                                            "needs a Keras optimizer; kolo's tf.compat.v1 "
                                            "optimizer reduces every pass"))
        return _legacy(optimizer, compression, sparse_as_dense, op, gradient_predivide_factor,
                       process_set)
    from kolo.tensorflow import keras
    return keras.DistributedOptimizer(optimizer, name=name, compression=compression,
                                      sparse_as_dense=sparse_as_dense,
                                      gradient_predivide_factor=gradient_predivide_factor, op=op,
                                      backward_passes_per_step=backward_passes_per_step,
                                      average_aggregated_gradients=average_aggregated_gradients,
                                      process_set=process_set,
                                      scale_local_gradients=scale_local_gradients)
