"""A worker of test_elastic.py: Horovod Elastic's TensorFlow program shape on
kolo — hvd.elastic.run, TensorFlowKerasState, DistributedGradientTape in a
tf.function — under elastic kolorun, and a single-process replay that checks
what it did.

  elastic_worker.py DIR [--hold-for-join]   under kolorun --min-np ...: trains
  elastic_worker.py DIR --replay            alone: checks DIR's result

Training: 240 samples of a fixed regression problem, a float64 Keras model
(an MLP plus an Embedding of the sample's index mod 8, whose gradient is a
tf.IndexedSlices), SGD with momentum, 3 epochs. A step takes the next size·4
samples of the epoch's order (fewer at its end); rank r trains on every
size-th of them from r, and the gradients of (size · the rank's loss sum /
the step's sample count) are averaged over the ranks: the step's mean
gradient whatever the split — and only if the traced step divides by the
size of the world it runs in, not of the one it was traced in. The state holds
the model and optimizer variables, the epoch, the samples of it consumed and
the log of steps (epoch, consumed, count): restore() drops uncommitted steps,
sync() gives a newcomer everything. A commit every 2 steps (where added
workers are noticed). At the end rank r writes DIR/result.r.json: the log and
the weights.

--hold-for-join: in a world smaller than the first one, after 6 steps of it,
rank 0 waits (up to 45 s) at a commit for a newer generation, so the test's
newcomer joins before the training ends however slow this machine is.

Replay: every epoch's steps tile [0, 240) in order; one process trains on the
same steps' samples and must end with the same weights (float64, 1e-9).
"""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from tfcommon import say, write_json  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

import kolo.tensorflow as hvd  # noqa: E402
from kolo import _C, basics  # noqa: E402

N, B, FEATURES, EPOCHS, COMMIT_EVERY = 240, 4, 6, 3, 2
LR, MOMENTUM = 0.05, 0.9


def data():
    i = np.arange(N, dtype=np.float64)[:, None]
    j = np.arange(FEATURES, dtype=np.float64)[None, :]
    x = np.sin(0.1 * i * (j + 1) + j)
    y = (x / (j + 1)).sum(axis=1, keepdims=True) + 0.1 * np.cos(i) + 0.05 * (i % 8)
    return x, (np.arange(N) % 8).astype(np.int32), y


def order(epoch):
    return np.random.default_rng(1000 + epoch).permutation(N)


def make_model():
    keras.utils.set_random_seed(0)  # the same start everywhere (the sync broadcasts anyway)
    x = keras.Input((FEATURES,), dtype="float64")
    ids = keras.Input((), dtype="int32")
    h = keras.layers.Dense(16, activation="tanh", dtype="float64")(x)
    out = keras.layers.Dense(1, dtype="float64")(h) + keras.layers.Embedding(8, 1, dtype="float64")(ids)
    return keras.Model([x, ids], out), keras.optimizers.SGD(LR, momentum=MOMENTUM)



def train(out_dir, hold_for_join):
    say(f"pid {os.getpid()} worker {os.environ.get('KOLO_WORKER_ID', '-')}")
    hvd.init()
    first_size = hvd.size()
    x, ids, y = data()
    model, opt = make_model()
    state = hvd.elastic.TensorFlowKerasState(model, opt, epoch=0, consumed=0, log=[])
    state.register_reset_callbacks([lambda: say(f"reset: rank {hvd.rank()} size {hvd.size()}")])

    @tf.function(reduce_retracing=True)
    def step(xb, ib, yb, scale):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model([xb, ib], training=True) - yb)) * scale
        tape = hvd.DistributedGradientTape(tape, op=hvd.Average)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    @hvd.elastic.run
    def run(state):
        say(f"synced: rank {hvd.rank()} size {hvd.size()} epoch {state.epoch} consumed {state.consumed} "
            f"steps {len(state.log)}")
        steps_here = 0
        while state.epoch < EPOCHS:
            o = order(state.epoch)
            while state.consumed < N:
                count = min(hvd.size() * B, N - state.consumed)
                window = o[state.consumed:state.consumed + count]
                mine = window[hvd.rank()::hvd.size()]
                try:
                    step(tf.constant(x[mine]), tf.constant(ids[mine]), tf.constant(y[mine]),
                         tf.constant(hvd.size() / count, tf.float64))
                except tf.errors.OpError as e:  # run() reads kolo's error out of TF's
                    report_failure("step", e, e.message)
                    raise
                state.log = state.log + [(state.epoch, state.consumed, count)]  # a new list: save keeps the old
                state.consumed += count
                steps_here += 1
                say(f"step {len(state.log)} rank {hvd.rank()} size {hvd.size()}")
                if len(state.log) % COMMIT_EVERY == 0:
                    if hold_for_join and hvd.size() < first_size and steps_here >= 6:
                        wait_for_newer_generation()
                    commit(state)
                time.sleep(0.03)
            state.epoch, state.consumed = state.epoch + 1, 0
            commit(state)

    run(state)
    # Every rank's result: the test checks they are all the same, rank 0's against the replay.
    result = {"log": state.log, "weights": [v.numpy().tolist() for v in model.trainable_variables]}
    path = os.path.join(out_dir, f"result.{hvd.rank()}.json")
    write_json(path, result)
    say(f"done: rank {hvd.rank()} size {hvd.size()} steps {len(state.log)}")


def report_failure(where, e, message):
    found = re.search(r"kolo rank \d+: [^\n]*", message)
    say(f"{where} failed: {type(e).__name__}: {found.group(0) if found else message[:300]}")


def commit(state):
    """state.commit(), saying why it failed: a peer that dies after its last
    step's allreduce is first noticed by the commit's broadcast, not a step."""
    try:
        state.commit()
    except hvd.HorovodInternalError as e:
        report_failure("commit", e, str(e))
        raise


def wait_for_newer_generation():
    """Rank 0 waits; the others wait for it in commit()'s check."""
    c = basics.comm_of_world()
    if c.rank() != 0:
        return
    deadline = time.monotonic() + 45
    while _C.elastic_latest_generation(c) <= _C.elastic_generation(c) and time.monotonic() < deadline:
        time.sleep(0.05)


def replay(out_dir):
    with open(os.path.join(out_dir, "result.0.json")) as f:
        result = json.load(f)
    log = [tuple(s) for s in result["log"]]
    at = {}
    for epoch, consumed, count in log:
        if at.get(epoch, 0) != consumed:
            sys.exit(f"replay: FAILED: epoch {epoch} step at {consumed}, expected {at.get(epoch, 0)}")
        at[epoch] = consumed + count
    if at != {e: N for e in range(EPOCHS)}:
        sys.exit(f"replay: FAILED: the epochs end at {at}")
    x, ids, y = data()
    model, opt = make_model()
    for epoch, consumed, count in log:
        w = order(epoch)[consumed:consumed + count]
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model([x[w], ids[w]], training=True) - y[w])) / count
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    worst = max(float(np.max(np.abs(np.array(w) - v.numpy())))
                for w, v in zip(result["weights"], model.trainable_variables))
    if worst > 1e-9:
        sys.exit(f"replay: FAILED: the weights differ from one process by {worst:.3g}")
    say(f"replay: OK: {len(log)} steps, step sizes {sorted(set(c for _, _, c in log))}, every sample "
        f"once per epoch, weights within {worst:.1e} of one process")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "--replay":
        replay(sys.argv[1])
    else:
        train(sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "--hold-for-join")
