"""kolo.tensorflow.keras.DistributedOptimizer for Keras 3: a subclass of the
given optimizer's class whose apply() (what apply_gradients and model.fit's
train step call) reduces the gradients over the ranks first."""
from kolo.basics import error
from kolo.process_sets import global_process_set
from kolo.reduce_ops import Average
from kolo.tensorflow import fusion
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.gradient_tape import scale_factors


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's: a new optimizer of the same class and configuration as
    ``optimizer`` (rebuilt from its get_config(), as Horovod does) that
    averages (op) gradients over the ranks before applying them. Wrap it
    before training: the new optimizer starts without state."""
    what = "keras.DistributedOptimizer"
    if backward_passes_per_step != 1:
        raise NotImplementedError(error(what, "backward_passes_per_step > 1 is not supported by kolo"))
    pre, post = scale_factors(what, op, gradient_predivide_factor)
    base = optimizer.__class__

    class _Distributed(base):
        def apply(self, grads, trainable_variables=None):
            grads = fusion.reduce_gradients(what, grads, op, compression, sparse_as_dense, pre,
                                            post, process_set)
            return super().apply(grads, trainable_variables)
    _Distributed.__name__ = _Distributed.__qualname__ = base.__name__
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    return _Distributed.from_config(config)
