"""kolo.tensorflow(.keras).elastic on one rank, outside an elastic job
(test_elastic.py's test_keras_callbacks): KerasState's save/restore/sync,
the three Keras callbacks around model.fit, run()'s reading of a kolo error
that TF wrapped, and the bad arguments. Run under kolorun -np 1."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from tfcommon import check, done  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo.tensorflow as hvd  # noqa: E402
import kolo.tensorflow.keras as hvdk  # noqa: E402

hvd.init()


def model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])


def values(variables):
    return [np.array(v.numpy(), copy=True) for v in variables]


def raises(cls, fn, text):
    try:
        fn()
    except cls as e:
        check(text in str(e), f"{cls.__name__} text: {e}")
        return
    check(False, f"no {cls.__name__} ({text})")


# model.fit with the callbacks: commits every 3 batches and at each epoch's
# end; state.epoch counts epochs over fit() calls, state.batch the last batch.
m = model()
m.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.01, momentum=0.9)), loss="mse")
state = hvdk.elastic.KerasState(m, batch=0, epoch=0)
x = np.random.RandomState(0).rand(64, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)
commits, commit = [], state.commit
state.commit = lambda: (commits.append((state.epoch, state.batch)), commit())


@hvdk.elastic.run
def fit(state, epochs):
    m.fit(x, y, batch_size=8, epochs=epochs - state.epoch, steps_per_epoch=8, verbose=0, callbacks=[
        hvdk.elastic.CommitStateCallback(state, batches_per_commit=3),
        hvdk.elastic.UpdateBatchStateCallback(state), hvdk.elastic.UpdateEpochStateCallback(state)])


fit(state, 2)
# In this callback order (Horovod's examples') a commit runs before the batch's
# and the epoch's updates: it sees the previous batch, and at an epoch's end the
# epoch's last batch. The count of 3 goes on across epochs (8 batches each).
check(commits == [(0, 1), (0, 4), (0, 7), (1, 0), (1, 2), (1, 5), (1, 7)], f"commits {commits}")
check((state.epoch, state.batch) == (2, 0), f"epoch {state.epoch} batch {state.batch}")
fit(state, 3)  # one more epoch: the state's count goes on
check(state.epoch == 3, f"epoch {state.epoch} after a second fit")

# save/restore: the model's and the optimizer's variables (momentum slots included), bit-identical
tracked = list(m.variables) + list(m.optimizer.variables)
check(len(m.optimizer.variables) == 2 + 4, f"optimizer variables {[v.path for v in m.optimizer.variables]}")
state.save()
kept = values(tracked)
for v in tracked:
    v.assign(v + tf.ones_like(v))
state.epoch = 99
state.restore()
check(all(np.array_equal(a, b) for a, b in zip(kept, values(tracked))), "restore is bit-identical")
check(state.epoch == 3, f"restore: epoch {state.epoch}")

# A newcomer's optimizer has no slots yet: sync builds it for the model first.
m2 = model()
opt2 = keras.optimizers.SGD(0.01, momentum=0.9)
check(not opt2.built, "a fresh optimizer is unbuilt")
state2 = hvd.elastic.TensorFlowKerasState(m2, opt2, step=5)
state2.sync()
check(opt2.built and len(opt2.variables) == 6, f"sync built the optimizer: {[v.path for v in opt2.variables]}")
check(state2.step == 5, "sync keeps the plain values")

# TensorFlowState: a list of variables.
v = tf.Variable([1.0, 2.0])
s = hvd.elastic.TensorFlowState([v], epoch=1)
s.save()
v.assign([5.0, 6.0])
s.restore()
check(v.numpy().tolist() == [1.0, 2.0], f"TensorFlowState restore: {v.numpy()}")

# run(): a kolo error that TF wrapped inside a tf.function is the KoloError it carries
wrapped = tf.errors.UnknownError(None, None, "FailedPreconditionError: kolo rank 0: allreduce: rank 1 "
                                 "(pid 7) died\n\t [[{{node kolo_allreduce}}]]")
other = tf.errors.UnknownError(None, None, "something else failed")


def raiser(e):
    def f(state):
        raise e
    return hvd.elastic.run(f)


try:
    raiser(wrapped)(s)
    check(False, "no error from run")
except hvd.HorovodInternalError as e:
    check(str(e) == "kolo rank 0: allreduce: rank 1 (pid 7) died", f"KoloError text: {e}")
    check(e.__cause__ is wrapped, "chained to TF's error")
try:
    raiser(other)(s)
    check(False, "no error from run")
except tf.errors.UnknownError as e:
    check(e is other and not isinstance(e, hvd.HorovodInternalError), "another OpError passes as it is")

# bad arguments
unbuilt = keras.Sequential([keras.layers.Dense(1)])
raises(ValueError, lambda: hvdk.elastic.KerasState(unbuilt), "the model must be built first")
raises(ValueError, lambda: hvd.elastic.TensorFlowState(), "give the variables to keep")
raises(NotImplementedError, lambda: hvd.elastic.TensorFlowState([v], session=object()), "TF1 sessions")
raises(ValueError, lambda: hvdk.elastic.CommitStateCallback(state, batches_per_commit=0),
       "batches_per_commit must be >= 1")

done(f"tf-elastic-keras rank {hvd.rank()} of {hvd.size()}")
