"""Horovod's TensorFlow 2 custom training loop on kolo (import line changed):

  kolorun -np 2 ~/.cache/kolo/venvs/tensorflow-2.21.0/bin/python examples/tensorflow/gradient_tape.py

Fashion-MNIST (fashion_mnist_tf.py). The Horovod shape: hvd.init(), each
rank its shard of the data (dataset.shard(size, rank)), the learning rate
scaled by hvd.size(), a DistributedGradientTape in a tf.function, model and
optimizer variables broadcast from rank 0 after the first step (the
optimizer's exist only then), test accuracy averaged with hvd.allreduce,
checkpoints by rank 0 only. kolorun tags every line with its rank.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist_tf as data  # noqa: E402

hvd = data.import_kolo("kolo.tensorflow")  # was: import horovod.tensorflow as hvd


def parse_args():
    p = data.arguments("kolo.tensorflow GradientTape Fashion-MNIST example")
    p.add_argument("--fp16-allreduce", action="store_true")
    p.add_argument("--checkpoint-dir", default="./checkpoints-tape")
    return p.parse_args()


def main():
    args = parse_args()
    train, test = data.start(hvd, tf, keras, args)

    model = data.cnn(keras)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(args.lr * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:  # a Python bool: traced into the first step only
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    checkpoint = tf.train.Checkpoint(model=model, optimizer=opt)
    first = True
    for epoch in range(1, args.epochs + 1):
        start, seen = time.time(), 0
        for step, (images, labels) in enumerate(train):
            loss = training_step(images, labels, first)
            first = False
            seen += int(images.shape[0])
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {float(loss):.4f}", flush=True)
        rate = seen * hvd.size() / (time.time() - start)
        correct = sum(int(tf.reduce_sum(tf.cast(tf.argmax(model(a, training=False), 1) == b,
                                                tf.int32))) for a, b in test)
        total = sum(int(b.shape[0]) for _, b in test)
        counts = hvd.allreduce(tf.constant([correct, total], tf.float64), op=hvd.Sum).numpy()
        accuracy = counts[0] / counts[1]
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test accuracy {100 * accuracy:.2f}%  ({rate:,.0f} samples/s, "
                  f"{hvd.size()} ranks)", flush=True)
            checkpoint.save(os.path.join(args.checkpoint_dir, "ckpt"))  # rank 0 only


if __name__ == "__main__":
    main()
