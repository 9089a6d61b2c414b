"""A worker of test_elastic.py's test_keras_fit_loses_a_worker: Horovod's
Keras elastic program shape on kolo — KerasState, the three callbacks,
model.fit inside hvd.elastic.run with each world's shard of the data —
under elastic kolorun. A worker is SIGKILLed mid-epoch; the survivors get
kolo's error out of model.fit's traced train step, restore the last commit,
re-form and fit on.

  elastic_fit_worker.py DIR

Prints "epoch E rank R size S batch B" at each batch's end, and at the end
writes DIR/fit.R.json: the state's epoch and batch, and the weights."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from tfcommon import say, write_json  # noqa: E402

import numpy as np  # noqa: E402
import keras  # noqa: E402

import kolo.tensorflow.keras as hvd  # noqa: E402

N, B, EPOCHS = 240, 4, 3



class Slow(keras.callbacks.Callback):
    """Paces the batches so that the test's kill lands mid-epoch, and says where it is."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        say(f"epoch {self.state.epoch} rank {hvd.rank()} size {hvd.size()} batch {batch}")
        time.sleep(0.03)


def main(out_dir):
    say(f"pid {os.getpid()} worker {os.environ.get('KOLO_WORKER_ID', '-')}")
    hvd.init()
    i = np.arange(N, dtype=np.float32)[:, None]
    x = np.sin(0.1 * i * np.arange(1, 7, dtype=np.float32))
    y = x.sum(axis=1, keepdims=True) + 0.1 * np.cos(i)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.02, momentum=0.9)), loss="mse")
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    state.register_reset_callbacks([lambda: say(f"reset: rank {hvd.rank()} size {hvd.size()}")])

    @hvd.elastic.run
    def train(state):
        mine = np.arange(hvd.rank(), N, hvd.size())  # this world's shard
        steps = N // (B * hvd.size())
        say(f"fit: rank {hvd.rank()} size {hvd.size()} from epoch {state.epoch}")
        model.fit(x[mine], y[mine], batch_size=B, epochs=EPOCHS - state.epoch, steps_per_epoch=steps,
                  shuffle=False, verbose=0, callbacks=[
                      hvd.elastic.CommitStateCallback(state, batches_per_commit=4),
                      hvd.elastic.UpdateBatchStateCallback(state),
                      hvd.elastic.UpdateEpochStateCallback(state), Slow(state)])

    train(state)
    result = {"epoch": state.epoch, "batch": state.batch,
              "weights": [v.numpy().tolist() for v in model.trainable_variables]}
    path = os.path.join(out_dir, f"fit.{hvd.rank()}.json")
    write_json(path, result)
    say(f"done: rank {hvd.rank()} size {hvd.size()} epoch {state.epoch}")


if __name__ == "__main__":
    main(sys.argv[1])
