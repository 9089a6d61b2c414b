"""DistributedGradientTape: a tf.GradientTape whose gradient() returns the
gradients reduced over all ranks (fusion.py: buckets, one callback a step);
PartialDistributedGradientTape: the same, but the gradients of local layers
(model parallelism: each rank has its own) stay local."""
import tensorflow as tf
from tensorflow import keras

from kolo.basics import error
from kolo.process_sets import global_process_set
from kolo.reduce_ops import Average, Sum, op_code
from kolo.tensorflow import bridge, fusion
from kolo.tensorflow.compression import Compression


def scale_factors(what, op, gradient_predivide_factor):
    """Horovod's gradient_predivide_factor f: Average becomes prescale 1/f
    and postscale f (the division by the size stays in the reduction)."""
    if gradient_predivide_factor != 1.0:
        if op_code(what, op) != op_code(what, Average):
            raise ValueError(error(what, "gradient_predivide_factor needs op=Average"))
        return 1.0 / gradient_predivide_factor, gradient_predivide_factor
    return 1.0, 1.0


class _Same:
    """Hashes and compares as the object itself (a Keras 3 Variable has no
    ref(), and its == is elementwise)."""

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Same) and other.obj is self.obj


def _identity(source):
    """A hashable identity of a tf.Variable, Keras Variable or tensor."""
    return source.ref() if hasattr(source, "ref") else _Same(source)


class LocalSources:
    """Horovod's local variables (model parallelism: each rank has its own):
    their gradients are not reduced over the ranks, only divided by the
    size when scale_local (Horovod's scale_local_gradients, so that a later
    average over ranks does not count them size times). The tape's and the
    Keras optimizer's."""

    def __init__(self, what, process_set, scale_local):
        self._ids = set()
        self._what, self._process_set, self._scale_local = what, process_set, scale_local

    def add(self, source):
        self._ids.add(_identity(source))

    def __contains__(self, source):
        return _identity(source) in self._ids

    def __len__(self):
        return len(self._ids)

    def reduce(self, grads, sources, reduce):
        """grads (one per source) with reduce(list) applied to the non-local ones."""
        local = [s in self for s in sources] if self._ids else [False] * len(grads)
        reduced = iter(reduce([g for g, mine in zip(grads, local) if not mine]))
        return [self._scaled(g) if mine else next(reduced) for g, mine in zip(grads, local)]

    def _scaled(self, g):
        if g is None or not self._scale_local:
            return g
        n = bridge.size_tensor(self._process_set, self._what)
        if isinstance(g, tf.IndexedSlices):
            return tf.IndexedSlices(g.values / tf.cast(n, g.values.dtype), g.indices, g.dense_shape)
        return g / tf.cast(n, g.dtype)

    @staticmethod
    def layers(what, local_layers):
        """Horovod's local_layers argument: None, a Keras layer or a list of them."""
        if local_layers is None:
            return []
        if isinstance(local_layers, keras.layers.Layer):
            return [local_layers]
        if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
            raise ValueError(error(what, "local_layers must be Keras layers (keras.layers.Layer)"))
        return list(local_layers)


class _DistributedGradientTape:
    """Wraps a tf.GradientTape (its recording, watch, jacobian... are the
    wrapped tape's); only gradient() differs."""

    def __init__(self, tape, compression, sparse_as_dense, op, gradient_predivide_factor,
                 process_set, scale_local_gradients=True):
        self._tape = tape
        self._local = LocalSources("DistributedGradientTape", process_set, scale_local_gradients)
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

    def register_local_source(self, source):
        """Horovod's: source (a variable or watched tensor) is this rank's own:
        its gradient is not reduced over the ranks (LocalSources)."""
        self._local.add(source)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._tape.gradient(target, sources, output_gradients, unconnected_gradients)
        out = self._local.reduce(
            tf.nest.flatten(grads, expand_composites=False), tf.nest.flatten(sources),
            lambda gs: fusion.reduce_gradients("DistributedGradientTape", gs, self._op,
                                               self._compression, self._sparse_as_dense, self._pre,
                                               self._post, self._process_set))
        return tf.nest.pack_sequence_as(grads, out)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None):
        """Horovod's: ([(local source, its gradient)], [(other source, reduced gradient)])."""
        sources = tf.nest.flatten(sources)
        grads = self.gradient(target, sources, output_gradients)
        pairs = list(zip(sources, grads))
        return ([p for p in pairs if p[0] in self._local],
                [p for p in pairs if p[0] not in self._local])


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
                                    gradient_predivide_factor, process_set, scale_local_gradients)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False, op=Average,
                                   gradient_predivide_factor=1.0, num_groups=0, groups=None,
                                   process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """Horovod's: a DistributedGradientTape whose local_layers' (a Keras layer
    or a list of them) trainable weights are local sources
    (register_local_source): their gradients are not reduced over the ranks."""
    local_layers = LocalSources.layers("PartialDistributedGradientTape", local_layers)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups, groups,
                                   process_set, scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
