"""Horovod's Keras (TF2) MNIST program on kolo, for Keras 3 (import line changed):

  kolorun -np 2 ~/.cache/kolo/venvs/tensorflow-2.21.0/bin/python examples/tensorflow/keras_fit.py

Fashion-MNIST (fashion_mnist_tf.py). model.fit on each rank's shard
(dataset.shard(size, rank)), the optimizer wrapped in
hvd.DistributedOptimizer, the learning rate scaled by hvd.size() after a
warm-up (LearningRateWarmupCallback), rank 0's initial weights everywhere
(BroadcastGlobalVariablesCallback), epoch metrics averaged over the ranks
(MetricAverageCallback), checkpoints and the progress bar on rank 0 only.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist_tf as data  # noqa: E402

hvd = data.import_kolo("kolo.tensorflow.keras")  # was: import horovod.tensorflow.keras as hvd


def parse_args():
    p = data.arguments("kolo.tensorflow.keras model.fit Fashion-MNIST example")
    p.add_argument("--warmup-epochs", type=float, default=0.25)
    p.add_argument("--checkpoint", default="./keras-checkpoint.weights.h5")
    return p.parse_args()


def main():
    args = parse_args()
    train, test = data.start(hvd, tf, keras, args)

    model = data.cnn(keras)
    scaled_lr = args.lr * hvd.size()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr,
                                                 warmup_epochs=args.warmup_epochs, verbose=1),
    ]
    if hvd.rank() == 0:  # one writer
        callbacks.append(keras.callbacks.ModelCheckpoint(args.checkpoint, save_weights_only=True))
    model.fit(train, epochs=args.epochs, callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0,
              shuffle=False)  # shuffled by the dataset
    _, local_accuracy = model.evaluate(test, verbose=0)  # equal shards: the mean of the means
    accuracy = float(hvd.allreduce(tf.constant(local_accuracy, tf.float64)))
    if hvd.rank() == 0:
        print(f"test accuracy {100 * accuracy:.2f}% after {args.epochs} epoch(s) on {hvd.size()} "
              "ranks", flush=True)


if __name__ == "__main__":
    main()
