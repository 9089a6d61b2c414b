#!/usr/bin/env python3
"""Keras 3 model.fit samples/s on 2 ranks: kolo (kolorun, hvd.DistributedOptimizer)
vs TensorFlow's own tf.distribute.MultiWorkerMirroredStrategy (CPU, RING
collectives over gRPC, TF_CONFIG on localhost), same model, data and batch,
alternating --reps times in one run; medians.

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
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, b, logs=None):
            if b == warmup:
                self.t0 = time.perf_counter()

        def on_train_batch_end(self, b, logs=None):
            if b == warmup + steps - 1:
                self.t1 = time.perf_counter()
    clock = Clock()
    if mode == "kolo":
        import kolo.tensorflow.keras as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(size, rank).batch(batch).repeat()
        model = build_model(keras, kind)
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss=loss)
        model.fit(ds, steps_per_epoch=warmup + steps, epochs=1, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), clock])
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING))
        rank, size = json.loads(os.environ["TF_CONFIG"])["task"]["index"], strategy.num_replicas_in_sync
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch * size).repeat().with_options(options)
        with strategy.scope():
            model = build_model(keras, kind)
            model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
        model.fit(ds, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=[clock])
    if rank == 0:
        print(f"RESULT samples_per_s={steps * batch * size / (clock.t1 - clock.t0):.1f}", flush=True)


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
    from compare import machine  # bench/torch/compare.py
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.path.abspath(os.path.join(a.build, "python")))
    me = [a.python, os.path.abspath(__file__), "--rank-side"]

    def result(out, what):
        m = re.search(r"RESULT samples_per_s=([\d.]+)", out)
        if not m:
            sys.exit(f"{what} failed:\n{out[-4000:]}")
        return float(m.group(1))

    def kolo(kind):
        p = subprocess.run([os.path.join(a.build, "tools", "kolorun", "kolorun"), "-np", "2", "--no-tag-output",
                            *me, "kolo", kind, str(a.steps), str(a.warmup), str(a.batch)],
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
            runs.append((kolo(kind), mwms(kind)))
        k = statistics.median(r[0] for r in runs)
        m = statistics.median(r[1] for r in runs)
        rows[kind] = (k, m, runs)
    lines = [f"# Keras 3 model.fit, 2 ranks, batch {a.batch} per rank, {a.steps} timed steps after {a.warmup}; "
             f"kolo vs MultiWorkerMirroredStrategy (RING), {a.reps} alternating rounds, medians",
             f"# machine: {a.machine or machine()}",
             f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average: {os.getloadavg()[0]:.2f}",
             "model  kolo samples/s  MWMS samples/s  kolo/MWMS"]
    for kind, (k, m, runs) in rows.items():
        lines.append(f"{kind:5}  {k:14.1f}  {m:14.1f}  {k / m:9.2f}")
    lines.append(f"# rounds (kolo, MWMS): { {kind: r[2] for kind, r in rows.items()} }")
    print("\n".join(lines), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--rank-side":
        rank_side(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
