"""Horovod's Keras callbacks for Keras 3 (model.fit on N ranks)."""
import keras
import numpy as np

from kolo import _C
from kolo.basics import comm_of_world, error, size
from kolo.tensorflow import ndarrays
from kolo.tensorflow.functions import broadcast_variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Every rank starts from root_rank's weights: the model's variables are
    broadcast when training begins, and the model's and optimizer's after the
    first batch (the optimizer's slots exist only once it has stepped), as
    Horovod does."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.local_variables = {id(v) for v in (local_variables or [])}
        self.broadcast_done = False

    def _variables(self, with_optimizer):
        vs = list(self.model.variables)
        if with_optimizer and self.model.optimizer is not None:
            vs += list(self.model.optimizer.variables)
        return [v for v in vs if id(v) not in self.local_variables]

    def on_train_begin(self, logs=None):
        broadcast_variables(self._variables(False), self.root_rank)

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        broadcast_variables(self._variables(True), self.root_rank)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """At each epoch's end, every numeric metric in logs becomes its average
    over the ranks (one allreduce of all of them, in sorted-name order); so
    rank 0's history and checkpoints see the job's metrics."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = np.array([float(logs[k]) for k in names], dtype=np.float64)
        c = comm_of_world()
        c.allreduce(ndarrays.ptr(values), ndarrays.ptr(values), values.size, _C.F64, _C.AVERAGE,
                    [values.size])
        for k, v in zip(names, values.tolist()):
            logs[k] = v


def _set_lr(optimizer, lr):
    optimizer.learning_rate.assign(lr)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """learning rate = initial_lr * multiplier(epoch) for start_epoch <= epoch
    < end_epoch (multiplier: a number or a function of the epoch; with
    staircase=False, of the fractional epoch, updated every batch).
    ``momentum_correction`` is accepted but not applied: Keras 3 compiles
    SGD's momentum into the train step as a constant."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch, self.end_epoch = start_epoch, end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self._ended = False

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        _set_lr(self.model.optimizer, self.initial_lr * self.multiplier(epoch))

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self.params.get("steps")
            if not self.steps_per_epoch:
                raise ValueError(error("LearningRateScheduleCallback", "staircase=False needs "
                                       "steps_per_epoch (model.fit did not say how many steps)"))

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            self._adjust(epoch)

    def on_batch_begin(self, batch, logs=None):
        if self.staircase:
            return
        epoch = self.current_epoch + float(batch) / self.steps_per_epoch
        if epoch < self.start_epoch:
            return
        if self.end_epoch is not None and epoch >= self.end_epoch:
            if self._ended:
                return
            self._ended = True  # once, the schedule's value at its end (warmup: initial_lr)
            epoch = self.end_epoch
        self._adjust(epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(np.asarray(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's warmup (Goyal et al.): the learning rate grows from
    initial_lr / size to initial_lr over warmup_epochs, batch by batch."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0):
        def multiplier(epoch):
            n = size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{float(np.asarray(self.model.optimizer.learning_rate)):g}.")
