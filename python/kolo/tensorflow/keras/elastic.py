"""Horovod Elastic for Keras 3 on kolo: ``hvd.elastic.run``,
``hvd.elastic.KerasState`` and the callbacks that keep it current inside
``model.fit``, after ``import kolo.tensorflow.keras as hvd``::

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(data, epochs=EPOCHS - state.epoch, steps_per_epoch=N, callbacks=[
            hvd.elastic.CommitStateCallback(state, batches_per_commit=10),
            hvd.elastic.UpdateBatchStateCallback(state),
            hvd.elastic.UpdateEpochStateCallback(state)])

Same names, arguments and behaviour as horovod.tensorflow.keras.elastic,
but for UpdateBatchStateCallback's shortened epoch (see there).
"""
import keras

from kolo.tensorflow.elastic import (HorovodInternalError, HostsUpdatedInterrupt, KoloError,  # noqa: F401
                                     ObjectState, State, TensorFlowKerasState, run)


class KerasState(TensorFlowKerasState):
    """Horovod's ``KerasState(model, optimizer=None, **kwargs)``: the model's and
    optimizer's variables (optimizer: else model.optimizer), plain values as
    attributes."""


class CommitStateCallback(keras.callbacks.Callback):
    """Commits the state every ``batches_per_commit`` batches and at the end of
    every epoch (a commit also checks for added workers)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError(f"kolo elastic: batches_per_commit must be >= 1, not {batches_per_commit!r}")
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        # fit() starts again after every re-formation: count from there on every rank alike
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the last finished batch of the epoch (0 after
    an epoch ends). Horovod's also shortens the first epoch after a
    re-formation by the batches already done (``params["steps"]``); Keras 3's
    fit() fixes an epoch's length when it starts and ignores that, so kolo
    does not pretend: give fit() the rest of the epoch yourself if it matters
    (e.g. a first fit(epochs=1, steps_per_epoch=N - state.batch) when
    state.batch > 0)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of epochs done over every fit() of
    the job: Keras counts epochs from fit()'s start; the state, across
    re-formations."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = ["run", "KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "TensorFlowKerasState", "ObjectState", "State",
           "HorovodInternalError", "HostsUpdatedInterrupt", "KoloError"]
