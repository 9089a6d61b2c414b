"""Data-parallel training with kolo.tensorflow gives the weights of a
single-process run over the concatenated batch (computed here with plain
TensorFlow, no kolo): DistributedGradientTape eagerly and in tf.function,
fp16 compression (close), the legacy tf.compat.v1 optimizer, Keras 3
model.fit with DistributedOptimizer and the callbacks, its
backward_passes_per_step, PartialDistributedOptimizer, and join() with
uneven steps. Run under kolorun (any -np)."""
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
R, N = hvd.rank(), hvd.size()
B, STEPS, LR = 4, 4, 0.05
rng = np.random.RandomState(0)
X = rng.randn(STEPS * B * N, 8).astype(np.float32)
Y = rng.randn(STEPS * B * N, 3).astype(np.float32)


def model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(3)])


def loss_of(m, x, y):
    return tf.reduce_mean(tf.square(m(x) - y))


def close(m, ref, tol, what):
    diffs = [float(np.max(np.abs(a - b))) for a, b in zip(m.get_weights(), ref.get_weights())]
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(ref.get_weights(), model(100).get_weights()))
    check(moved > 1e-3, f"{what}: the reference did not train")
    check(max(diffs) < tol, f"{what}: weights differ from the single-process run by {max(diffs)}")


def local_rows(step, r=R):
    lo = (step * N + r) * B
    return X[lo:lo + B], Y[lo:lo + B]


def global_rows(step, ranks=None):
    ranks = range(N) if ranks is None else ranks
    rows = [local_rows(step, r) for r in ranks]
    return np.concatenate([x for x, _ in rows]), np.concatenate([y for _, y in rows])


def reference_sgd(steps_of_ranks):
    """Plain TF on one process: step k uses the rows of the ranks in steps_of_ranks[k]."""
    ref = model(100)
    opt = keras.optimizers.SGD(LR, momentum=0.9)
    for k, ranks in enumerate(steps_of_ranks):
        x, y = global_rows(k, ranks)
        with tf.GradientTape() as tape:
            loss = loss_of(ref, x, y)
        opt.apply_gradients(zip(tape.gradient(loss, ref.trainable_variables), ref.trainable_variables))
    return ref


def test_tape(traced, compression, tol):
    m = model(100 + R)  # every rank starts elsewhere; rank 0's weights win the broadcast
    hvd.broadcast_variables(m.variables, root_rank=0)
    opt = keras.optimizers.SGD(LR, momentum=0.9)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_of(m, x, y)
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))
    step = tf.function(step) if traced else step
    for k in range(STEPS):
        step(*local_rows(k))
    close(m, reference_sgd([None] * STEPS), tol, f"tape traced={traced} {compression.__name__}")


def test_legacy_optimizer():
    """TF1-style optimizers take tf.Variables (not Keras 3's): a linear model."""
    def train(distributed):
        w = tf.Variable(np.ones((8, 3), np.float32) * 0.1)
        b = tf.Variable(np.zeros(3, np.float32))
        opt = tf.compat.v1.train.MomentumOptimizer(LR, momentum=0.9)
        opt = hvd.DistributedOptimizer(opt) if distributed else opt
        for k in range(STEPS):
            x, y = local_rows(k) if distributed else global_rows(k)
            opt.minimize(lambda: tf.reduce_mean(tf.square(x @ w + b - y)), var_list=[w, b])
        return np.concatenate([w.numpy().ravel(), b.numpy()])
    got, want = train(True), train(False)
    check(np.max(np.abs(want - 0.1 * (want.size > 0))) > 1e-3, "legacy: the reference trained")
    check(np.max(np.abs(got - want)) < 1e-5, f"tf.compat.v1 DistributedOptimizer: differs by "
          f"{np.max(np.abs(got - want))}")


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.losses, self.lrs = [], []

    def on_epoch_end(self, epoch, logs=None):
        self.losses.append(float(logs["loss"]))

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append(float(np.asarray(self.model.optimizer.learning_rate)))


def test_keras_fit():
    epochs = 2
    ds = tf.data.Dataset.from_tensor_slices((X, Y))
    m = model(100 + R)
    m.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.9)), loss="mse")
    local, averaged = Recorder(), Recorder()
    m.fit(ds.shard(N, R).batch(B), epochs=epochs, verbose=0,
          callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(0), local,
                     hvdk.callbacks.MetricAverageCallback(), averaged])
    ref = model(100)
    ref.compile(optimizer=keras.optimizers.SGD(LR, momentum=0.9), loss="mse")
    # shard(N, R) gives rank R the elements R, R+N, ...: each step's union is
    # the next B*N elements in order, the single process's batch.
    ref.fit(ds.batch(B * N), epochs=epochs, verbose=0)
    close(m, ref, 1e-5, "keras model.fit with DistributedOptimizer")
    every = hvd.allgather_object(local.losses)
    want = [sum(e[i] for e in every) / N for i in range(epochs)]
    check(np.allclose(averaged.losses, want, rtol=1e-6), f"MetricAverageCallback {averaged.losses} "
          f"vs {want}")


def test_keras_accumulation(average):
    """backward_passes_per_step=2: model.fit on N ranks equals one process
    applying, per update, the sum (average_aggregated_gradients: the mean)
    of the gradients of two consecutive global batches at the same weights.
    Then the same optimizer class in an eager loop and a tf.function loop:
    iterations counts every pass, the counter those since the last update."""
    passes = 2
    ds = tf.data.Dataset.from_tensor_slices((X, Y))
    m = model(100)
    opt = hvdk.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.9), backward_passes_per_step=passes,
                                    average_aggregated_gradients=average)
    m.compile(optimizer=opt, loss="mse")
    m.fit(ds.shard(N, R).batch(B), epochs=1, verbose=0)
    ref = model(100)
    ref_opt = keras.optimizers.SGD(LR, momentum=0.9)
    for u in range(STEPS // passes):
        total = None
        for k in range(u * passes, (u + 1) * passes):
            x, y = global_rows(k)
            with tf.GradientTape() as tape:
                loss = loss_of(ref, x, y)
            g = tape.gradient(loss, ref.trainable_variables)
            total = g if total is None else [a + b for a, b in zip(total, g)]
        ref_opt.apply_gradients(zip([t / passes if average else t for t in total], ref.trainable_variables))
    close(m, ref, 1e-5, f"keras backward_passes_per_step={passes} average={average}")
    check(int(opt.iterations) == STEPS and int(opt._agg_helper.counter) == 0,
          f"iterations {int(opt.iterations)}, counter {int(opt._agg_helper.counter)} after {STEPS} passes")
    for traced in (False, True):
        w = keras.Variable(np.zeros(2, np.float32))
        sgd = hvdk.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=3,
                                        average_aggregated_gradients=average)

        def step(g):
            sgd.apply([g], [w])
        step = tf.function(step) if traced else step
        # pass k on rank r: gradient (k + 1) * (r + 1); an update averages over the ranks
        mean_r = (N + 1) / 2.0
        for k in range(4):
            step(tf.constant([(k + 1) * (R + 1.0), 1.0]))
        summed = (1 + 2 + 3) * mean_r
        want = -(summed / 3 if average else summed)
        got = w.numpy()
        check(abs(got[0] - want) < 1e-5 and int(sgd.iterations) == 4 and int(sgd._agg_helper.counter) == 1,
              f"accumulation traced={traced}: w {got}, want {want}; iterations {int(sgd.iterations)}, "
              f"counter {int(sgd._agg_helper.counter)}")


XP = np.arange(3 * N, dtype=np.float32).reshape(N, 3) / 7.0  # rank r's one row: XP[r]


def partial_model(r):
    """Rank r's model of the partial tests: every weight r / 10 + 0.1."""
    init = keras.initializers.Constant(r / 10.0 + 0.1)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, kernel_initializer=init,
                                                                   bias_initializer=init),
                             keras.layers.Dense(3, kernel_initializer=init, bias_initializer=init)])


def partial_loss(m, r, tape_of=lambda t: t):
    """(tape, loss) of rank r's row on m; tape_of wraps the tape."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(m(XP[r:r + 1]) - 1.0))
    return tape_of(tape), loss


def partial_reference():
    """Every rank's gradients, computed here with plain TF."""
    every = []
    for r in range(N):
        m = partial_model(r)
        tape, loss = partial_loss(m, r)
        every.append([g.numpy() for g in tape.gradient(loss, m.trainable_variables)])
    return every


def test_partial_optimizer():
    """PartialDistributedOptimizer: the local layers' gradients are this
    rank's own divided by the size; the others' the average over the ranks
    (plain SGD with rate 1: the weights move by minus the gradient)."""
    every = partial_reference()
    for local in (0, 1, 2):
        m = partial_model(R)
        before = [v.numpy() for v in m.trainable_variables]
        opt = hvdk.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=m.layers[:local])
        tape, loss = partial_loss(m, R)
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
        for i, v in enumerate(m.trainable_variables):
            want = every[R][i] / N if i < 2 * local else sum(e[i] for e in every) / N
            check(np.max(np.abs(before[i] - v.numpy() - want)) < 1e-5,
                  f"partial optimizer, {local} local layers, var {i}")


def test_lr_callbacks():
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).shard(N, R).batch(B)
    m = model(100)
    m.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(LR)), loss="mse")
    rec = Recorder()
    m.fit(ds, epochs=3, verbose=0, callbacks=[
        hvdk.callbacks.LearningRateWarmupCallback(initial_lr=LR, warmup_epochs=2), rec])
    want = [LR / N * ((e + b / STEPS) * (N - 1) / 2 + 1) for e in range(2) for b in range(STEPS)]
    check(np.allclose(rec.lrs[:2 * STEPS], want, rtol=1e-5), f"warmup {rec.lrs} vs {want}")
    check(np.allclose(rec.lrs[2 * STEPS:], LR, rtol=1e-6), f"after the warmup: {rec.lrs}")
    rec = Recorder()
    m.fit(ds, epochs=3, verbose=0, callbacks=[
        hvdk.callbacks.LearningRateScheduleCallback(LR, multiplier=lambda e: 0.5 ** e, start_epoch=1),
        rec])
    # epoch 0 (before start_epoch) keeps the rate the warmup left; then LR * 0.5^epoch
    check(np.allclose(rec.lrs[STEPS:], [LR * 0.5 ** e for e in (1, 2) for _ in range(STEPS)]),
          f"schedule {rec.lrs}")


def test_join():
    """Rank r takes 2 + r steps, then joins: each step averages over the
    ranks still stepping; a rank's weights are the reference's after its steps."""
    m = model(100)
    opt = keras.optimizers.SGD(LR, momentum=0.9)
    mine = 2 + R
    for k in range(mine):
        x, y = local_rows(k)
        with tf.GradientTape() as tape:
            loss = loss_of(m, x, y)
        grads = hvd.DistributedGradientTape(tape).gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))
    last = int(hvd.join())
    check(last == N - 1, f"join returned {last}, expected the last rank {N - 1}")
    ref = reference_sgd([[r for r in range(N) if 2 + r > k] for k in range(mine)])
    close(m, ref, 1e-5, "join with uneven steps")


def test_partial_tape():
    """PartialDistributedGradientTape (and register_local_source): the local
    layers' gradients stay this rank's, divided by the size (Horovod's
    scale_local_gradients); the others are the average over the ranks."""
    every = partial_reference()
    for local in (0, 1, 2):
        m = partial_model(R)
        tape, loss = partial_loss(m, R, lambda t: hvd.PartialDistributedGradientTape(
            t, local_layers=m.layers[:local]))
        mine, others = tape.get_local_and_global_gradients(loss, m.trainable_variables)
        check(len(mine) == 2 * local and len(others) == 4 - 2 * local, f"partial tape split {local}")
        got = dict((id(v), g.numpy()) for v, g in mine + others)
        for i, v in enumerate(m.trainable_variables):
            want = every[R][i] / N if i < 2 * local else sum(e[i] for e in every) / N
            check(np.max(np.abs(got[id(v)] - want)) < 1e-5, f"partial tape, {local} local layers, var {i}")


def test_sync_batch_norm():
    """SyncBatchNormalization on each rank's rows (rank r has r + 1 of them)
    equals Keras' BatchNormalization over the concatenated batch: outputs,
    moving statistics and the input gradient."""
    full = np.concatenate([np.arange(2 * (r + 1), dtype=np.float32).reshape(r + 1, 2) * (r + 1) + r
                           for r in range(N)])
    lo = sum(r + 1 for r in range(R))
    mine = full[lo:lo + R + 1]
    ref, sync = keras.layers.BatchNormalization(axis=1), hvd.SyncBatchNormalization(axis=1)
    xs, xm = tf.constant(full), tf.constant(mine)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([xs, xm])
        want, got = ref(xs, training=True), sync(xm, training=True)
        lw, lg = tf.reduce_sum(want * want), tf.reduce_sum(got * got)
    check(np.max(np.abs(got.numpy() - want.numpy()[lo:lo + R + 1])) < 1e-4, "SyncBatchNormalization output")
    check(np.max(np.abs(sync.moving_mean.numpy() - ref.moving_mean.numpy())) < 1e-5 and
          np.max(np.abs(sync.moving_variance.numpy() - ref.moving_variance.numpy())) < 1e-4,
          "SyncBatchNormalization moving statistics")
    # Each rank's loss depends on every rank's rows through the statistics:
    # the gradient of the rank's own loss carries the others' (allreduce's backward).
    gw, gg = tape.gradient(lw, xs).numpy()[lo:lo + R + 1], tape.gradient(lg, xm).numpy()
    check(np.max(np.abs(gg - gw)) < 1e-3, f"SyncBatchNormalization gradient differs by {np.max(np.abs(gg - gw))}")
    del tape
    try:
        hvd.SyncBatchNormalization(fused=True)
        check(False, "fused=True accepted")
    except ValueError as e:
        check("fused" in str(e), f"fused error: {e}")


test_partial_tape()
test_sync_batch_norm()
test_tape(False, hvd.Compression.none, 1e-5)
test_tape(True, hvd.Compression.none, 1e-5)
test_tape(True, hvd.Compression.fp16, 1e-2)
test_legacy_optimizer()
test_keras_fit()
test_keras_accumulation(False)
test_keras_accumulation(True)
test_partial_optimizer()
test_lr_callbacks()
test_join()
hvd.shutdown()
done(f"tf-training rank {R} of {N}")
