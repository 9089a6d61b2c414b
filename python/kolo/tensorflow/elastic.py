"""Horovod Elastic for TensorFlow 2 on kolo: ``hvd.elastic.run``,
``hvd.elastic.TensorFlowKerasState``, ``hvd.elastic.TensorFlowState`` after
``import kolo.tensorflow as hvd`` (Keras callbacks: kolo.tensorflow.keras.elastic).

kolo/elastic.py says how re-formation works; the states here keep copies of
variables in host memory (save), assign them back (restore, bit-identical)
and send the root's values to every rank (sync: broadcast_variables, then
the plain values with broadcast_object). Eager TensorFlow 2 only: a TF1
session is an error.
"""
import functools
import re

import numpy as np
import tensorflow as tf

from kolo import elastic as _elastic
from kolo.basics import error
from kolo.elastic import (HorovodInternalError, HostsUpdatedInterrupt, KoloError, ObjectState,  # noqa: F401
                          State, run_fn)
from kolo.tensorflow.functions import broadcast_object, broadcast_variables

# Inside a tf.function TF reports a collective's failure as a tf.errors.OpError
# (FailedPreconditionError, errors.py) whose message carries kolo's one-line text.
_KOLO_TEXT = re.compile(r"kolo rank \d+: [^\n]*")


def run(func):
    """Horovod's decorator (kolo.elastic.run); a kolo error that TF wrapped in
    a tf.errors.OpError inside a tf.function (model.fit's train step,
    DistributedGradientTape traced) counts as the KoloError it carries."""
    @functools.wraps(func)
    def unwrapped(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as e:
            found = None if isinstance(e, KoloError) else _KOLO_TEXT.search(e.message or "")
            if found is None:
                raise
            raise KoloError(found.group(0)) from e
    return _elastic.run(unwrapped)


class _VariablesState(ObjectState):
    """The variables of _tracked() kept across re-formations, and plain values."""

    def __init__(self, **kwargs):
        self._keep()
        super().__init__(bcast_object=broadcast_object, **kwargs)

    def _tracked(self):
        raise NotImplementedError

    def _keep(self):
        self._kept = [np.array(v.numpy(), copy=True) for v in self._tracked()]

    def save(self):
        self._keep()
        super().save()

    def restore(self):
        for v, value in zip(self._tracked(), self._kept):
            v.assign(value)
        super().restore()

    def sync(self):
        root = self.sync_root()
        broadcast_variables(self._tracked(), root_rank=root)
        self._sync_values(root)
        self.save()
        self.synced()


class TensorFlowState(_VariablesState):
    """Horovod's ``TensorFlowState(variables=None, session=None, **kwargs)``: a
    list of tf.Variables, and plain values as attributes (``state.epoch``)."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None or not tf.executing_eagerly():
            raise NotImplementedError(error("elastic.TensorFlowState", "TF1 sessions and graphs are not "
                                            "supported by kolo: use TensorFlow 2 eagerly"))
        if variables is None:
            raise ValueError(error("elastic.TensorFlowState", "give the variables to keep (TensorFlow 2 has "
                                   "no global variables), e.g. model.variables"))
        self.variables = list(variables)
        super().__init__(**kwargs)

    def _tracked(self):
        return self.variables


class TensorFlowKerasState(_VariablesState):
    """Horovod's ``TensorFlowKerasState(model, optimizer=None, backend=None,
    **kwargs)``: a built Keras model's variables and its optimizer's (the
    optimizer given, else model.optimizer).

    A Keras 3 optimizer makes its slot variables when first applied; a worker
    that just joined has none yet. So the optimizer is built for the model's
    trainable variables before every save and sync: every rank then holds the
    same variables, and the root's slots reach the newcomer."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, "built", True):
            raise ValueError(error("elastic.TensorFlowKerasState", "the model must be built first "
                                   "(model.build(input_shape), or call it once)"))
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        super().__init__(**kwargs)

    def _tracked(self):
        if self.optimizer is None:
            return list(self.model.variables)
        if not self.optimizer.built:
            self.optimizer.build(self.model.trainable_variables)
        return list(self.model.variables) + list(self.optimizer.variables)


__all__ = ["run", "TensorFlowKerasState", "TensorFlowState", "ObjectState", "State",
           "HorovodInternalError", "HostsUpdatedInterrupt", "KoloError", "run_fn"]
