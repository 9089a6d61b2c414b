#!/usr/bin/env python3
"""Keras 3 training samples/s on 2 ranks: kolo (kolorun, DistributedGradientTape)
vs TensorFlow's own tf.distribute.MultiWorkerMirroredStrategy (CPU, RING
collectives over gRPC, TF_CONFIG on localhost), same model, data, batch and
custom training loop; and kolo under model.fit (hvd.DistributedOptimizer).
Alternating --reps times in one run; medians.

  bench/tensorflow/keras_throughput.py --python ~/.cache/kolo/venvs/tensorflow-2.21.0/bin/python \
      [--build build] [--models mlp,cnn] [--steps 60] [--warmup 10] [--batch 64] [--reps 3] [--out FILE]

Models: mlp 784-1024-1024-10 (1.9 M parameters: communication-heavy), cnn the
examples' conv32-conv64-fc128 (1.2 M: compute-heavy). Synthetic Fashion-MNIST-shaped
data (the same on both sides); one intra-op thread per rank.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build_model(keras, kind):
    if kind == "mlp":
        layers = [keras.layers.Flatten(), keras.layers.Dense(1024, activation="relu"),
                  keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)]
    else:
        layers = [keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.Conv2D(64, 3, activation="relu"),
                  keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                  keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)]
    return keras.Sequential([keras.Input((28, 28, 1))] + layers)


def rank_side(mode, kind, steps, warmup, batch):
    """One rank: mode "kolo" (DistributedGradientTape), "mwms" (the strategy's
    replica step) or "kolo-fit" (model.fit with hvd.DistributedOptimizer).
    The same custom loop on both sides: Keras 3.15's model.fit under
    MultiWorkerMirroredStrategy fails before the first step (its symbolic
    build reduces the (x, y) tuple of PerReplica values, which the strategy
    cannot convert)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import keras

    rng = np.random.RandomState(0)
    n = (steps + warmup) * batch * 2
    x = rng.rand(n, 28, 28, 1).astype(np.float32)
    y = rng.randint(0, 10, n).astype(np.int64)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                         reduction="sum_over_batch_size")

    def timed_loop(step, it):
        for _ in range(warmup):
            step(it)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(it)
        return time.perf_counter() - t0

    if mode == "mwms":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING))
        rank, size = json.loads(os.environ["TF_CONFIG"])["task"]["index"], strategy.num_replicas_in_sync
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch * size).repeat().with_options(options)
        with strategy.scope():
            model = build_model(keras, kind)
            opt = keras.optimizers.SGD(0.01)
        it = iter(strategy.experimental_distribute_dataset(ds))

        @tf.function
        def step(it):
            def replica(xb, yb):
                with tf.GradientTape() as tape:
                    loss = loss_fn(yb, model(xb, training=True)) / size  # the strategy sums
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            strategy.run(replica, args=next(it))
        seconds = timed_loop(step, it)
    else:
        import kolo.tensorflow as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(size, rank).batch(batch).repeat()
        model = build_model(keras, kind)
        if mode == "kolo-fit":
            import kolo.tensorflow.keras as hvdk

            class Clock(keras.callbacks.Callback):
                def on_train_batch_begin(self, b, logs=None):
                    if b == warmup:
                        self.t0 = time.perf_counter()

                def on_train_batch_end(self, b, logs=None):
                    if b == warmup + steps - 1:
                        self.seconds = time.perf_counter() - self.t0
            clock = Clock()
            model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss=loss_fn)
            model.fit(ds, steps_per_epoch=warmup + steps, epochs=1, verbose=0,
                      callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(0), clock])
            seconds = clock.seconds
        else:
            opt = keras.optimizers.SGD(0.01)
            it = iter(ds)

            @tf.function
            def step(it):
                xb, yb = next(it)
                with tf.GradientTape() as tape:
                    loss = loss_fn(yb, model(xb, training=True))
                tape = hvd.DistributedGradientTape(tape)
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
            hvd.broadcast_variables(model.variables, root_rank=0)
            seconds = timed_loop(step, it)
    if rank == 0:
        print(f"RESULT samples_per_s={steps * batch * size / seconds:.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--machine", default=None)
    ap.add_argument("--out")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(HERE, "..", "torch"))
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    from compare import machine  # bench/torch/compare.py
    from overhead import report  # bench/python/overhead.py
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.path.abspath(os.path.join(a.build, "python")))
    me = [a.python, os.path.abspath(__file__), "--rank-side"]

    def result(out, what):
        m = re.search(r"RESULT samples_per_s=([\d.]+)", out)
        if not m:
            sys.exit(f"{what} failed:\n{out[-4000:]}")
        return float(m.group(1))

    def kolo(kind, mode="kolo"):
        p = subprocess.run([os.path.join(a.build, "tools", "kolorun", "kolorun"), "-np", "2", "--no-tag-output",
                            *me, mode, kind, str(a.steps), str(a.warmup), str(a.batch)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return result(p.stdout, "kolo")

    def mwms(kind):
        ports = []
        for _ in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        cluster = {"worker": [f"localhost:{p}" for p in ports]}
        procs = [subprocess.Popen([*me, "mwms", kind, str(a.steps), str(a.warmup), str(a.batch)],
                                  env=dict(env, TF_CONFIG=json.dumps({"cluster": cluster,
                                                                      "task": {"type": "worker", "index": i}})),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for i in range(2)]
        outs = [p.communicate(timeout=900)[0] for p in procs]
        return result(outs[0], "MultiWorkerMirroredStrategy")

    rows = {}
    for kind in a.models.split(","):
        runs = []
        for _ in range(a.reps):
            runs.append((kolo(kind), mwms(kind), kolo(kind, "kolo-fit")))
        k = statistics.median(r[0] for r in runs)
        m = statistics.median(r[1] for r in runs)
        f = statistics.median(r[2] for r in runs)
        rows[kind] = (k, m, f, runs)
    lines = [f"# Keras 3 model, 2 ranks, batch {a.batch} per rank, {a.steps} timed steps after {a.warmup}; "
             f"one custom loop (tf.function step): kolo's DistributedGradientTape vs "
             f"MultiWorkerMirroredStrategy (RING); and kolo under model.fit; {a.reps} alternating rounds, medians",
             f"# machine: {a.machine or machine()}",
             f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average: {os.getloadavg()[0]:.2f}",
             "model  kolo samples/s  MWMS samples/s  kolo/MWMS  kolo model.fit samples/s"]
    for kind, (k, m, f, runs) in rows.items():
        lines.append(f"{kind:5}  {k:14.1f}  {m:14.1f}  {k / m:9.2f}  {f:23.1f}")
    lines.append(f"# rounds (kolo, MWMS, kolo model.fit): { {kind: r[3] for kind, r in rows.items()} }")
    report(lines, a.out)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--rank-side":
        rank_side(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
