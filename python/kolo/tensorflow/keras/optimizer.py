"""kolo.tensorflow.keras.DistributedOptimizer for Keras 3: a subclass of the
given optimizer's class whose apply() (what apply_gradients and model.fit's
train step call) reduces the gradients over the ranks first.

backward_passes_per_step = N > 1 (Horovod's local gradient aggregation): each
apply() adds the gradients to local accumulators; every N-th reduces their
sum (their mean with average_aggregated_gradients) over the ranks, applies
it and zeroes them. The others only count: iterations grows by one per
apply() either way, as Horovod's. PartialDistributedOptimizer and
register_local_var: gradients of local variables (model parallelism) are not
reduced, only divided by the size (scale_local_gradients)."""
import tensorflow as tf

from kolo.basics import error
from kolo.process_sets import global_process_set
from kolo.reduce_ops import Average
from kolo.tensorflow import fusion
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.gradient_tape import LocalSources, scale_factors


class _Accumulation:
    """The local sums of N backward passes. Its tf.Variables are not the
    optimizer's Keras variables on purpose: BroadcastGlobalVariablesCallback
    broadcasts those, and a rank's partial sum must stay its own. `counter`
    (passes since the last update) is the name Horovod's helper gives it."""

    def __init__(self, passes, average):
        self.passes, self.average = passes, average
        self.sums = None
        with tf.init_scope():
            self.counter = tf.Variable(0, dtype=tf.int32, trainable=False, name="kolo_passes")

    def add(self, grads, variables):
        if self.sums is None:
            with tf.init_scope():  # once, outside any trace
                self.sums = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                         name="kolo_accumulator") for v in variables]
        for s, g in zip(self.sums, grads):
            if g is not None:
                s.assign_add(tf.convert_to_tensor(g))  # an IndexedSlices is summed dense
        return self.counter.assign_add(1)

    def take(self, grads):
        """The accumulated gradients (None where this pass had none), then zero."""
        out = [None if g is None else (s.read_value() / self.passes if self.average else s.read_value())
               for s, g in zip(self.sums, grads)]
        with tf.control_dependencies([o for o in out if o is not None]):
            for s in self.sums:
                s.assign(tf.zeros_like(s))
            self.counter.assign(0)
        return out


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
    if int(backward_passes_per_step) < 1:
        raise ValueError(error(what, f"backward_passes_per_step must be at least 1, not "
                                     f"{backward_passes_per_step}"))
    passes = int(backward_passes_per_step)
    pre, post = scale_factors(what, op, gradient_predivide_factor)
    base = optimizer.__class__

    class _Distributed(base):
        def register_local_var(self, var):
            """Horovod's: var is this rank's own; its gradient is not reduced."""
            self._kolo_locals().add(var)

        def _kolo_locals(self):
            if getattr(self, "_kolo_local_sources", None) is None:
                self._kolo_local_sources = LocalSources(what, process_set, scale_local_gradients)
            return self._kolo_local_sources

        def _kolo_reduce(self, grads, trainable_variables):
            def reduce(gs):
                return fusion.reduce_gradients(what, gs, op, compression, sparse_as_dense, pre, post,
                                               process_set)
            local = self._kolo_locals()
            if not local:
                return reduce(grads)
            return local.reduce(grads, self._kolo_variables(trainable_variables), reduce)

        def apply(self, grads, trainable_variables=None):
            grads = list(grads)
            if passes == 1 or not grads:
                return super().apply(self._kolo_reduce(grads, trainable_variables), trainable_variables)
            variables = self._kolo_variables(trainable_variables)
            if not self.built:  # as Keras' apply() would, but before the branch below
                self.build(variables)
                self.built = True
            if getattr(self, "_agg_helper", None) is None:
                self._agg_helper = _Accumulation(passes, average_aggregated_gradients)
            agg = self._agg_helper
            count = agg.add(grads, variables)

            def update():
                super(_Distributed, self).apply(self._kolo_reduce(agg.take(grads), variables),
                                                variables)

            def skip():
                self.iterations.assign_add(1)
            if not tf.executing_eagerly():
                tf.cond(count >= passes, update, skip)
            elif int(count) >= passes:
                update()
            else:
                skip()

        def _kolo_variables(self, trainable_variables):
            if trainable_variables is not None:
                return list(trainable_variables)
            return list(self._trainable_variables)  # Keras' own: what apply() uses when not given
    _Distributed.__name__ = _Distributed.__qualname__ = base.__name__
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    return _Distributed.from_config(config)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """Horovod's: a DistributedOptimizer whose local_layers' (a Keras layer or
    a list of them) trainable weights are local variables (register_local_var)."""
    layers = LocalSources.layers("keras.PartialDistributedOptimizer", local_layers)
    opt = DistributedOptimizer(optimizer, name=name, compression=compression,
                               sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               backward_passes_per_step=backward_passes_per_step,
                               average_aggregated_gradients=average_aggregated_gradients,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    for layer in layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt

