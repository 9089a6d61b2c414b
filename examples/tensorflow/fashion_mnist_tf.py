"""What the TensorFlow examples share: Fashion-MNIST as NumPy arrays (the IDX
reader of examples/python/fashion_mnist_data.py), Horovod's TF2 MNIST
network, and kolo's import from a pip install or from this checkout's build."""
import importlib
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from fashion_mnist_data import DEFAULT_DIR, MEAN, STD, read_idx  # noqa: E402,F401


def import_kolo(module):
    """kolo.tensorflow or kolo.tensorflow.keras: installed, else the checkout's
    build (scripts/build.sh; KOLO_BUILD_DIR names another)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "..", "..", os.environ.get("KOLO_BUILD_DIR", "build"),
                                        "python"))
        return importlib.import_module(module)


def arguments(description):
    """The options both examples take; each adds its own."""
    import argparse
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.001, help="Adam's learning rate on one rank")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir", default=DEFAULT_DIR)
    p.add_argument("--limit", type=int, default=0, help="first N training and test images only (smoke tests)")
    return p


def start(hvd, tf, keras, args):
    """hvd.init(), one core per rank, a seed per rank (different on purpose:
    rank 0's weights reach the others by broadcast), and this rank's shards
    of the training set (shuffled) and of the test set as tf.data pipelines."""
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    keras.utils.set_random_seed(args.seed + hvd.rank())
    x, y = load(args.data_dir, "train", args.limit)
    xt, yt = load(args.data_dir, "t10k", args.limit)
    train = (tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank())
             .shuffle(10000, seed=args.seed).batch(args.batch_size))
    test = tf.data.Dataset.from_tensor_slices((xt, yt)).shard(hvd.size(), hvd.rank()).batch(1000)
    return train, test


def load(data_dir, split, limit=0):
    """split "train" (60,000) or "t10k" (10,000): images [n, 28, 28, 1] float32
    normalised, labels int64; limit > 0 keeps the first limit."""
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 2051, 16)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 2049, 8)
    x = (images.reshape(-1, 28, 28, 1).astype(np.float32) / 255.0 - MEAN) / STD
    y = labels.astype(np.int64)
    return (x[:limit], y[:limit]) if limit else (x, y)


def cnn(keras):
    """Horovod's TF2 MNIST network: conv32-conv64-maxpool-fc128 (1.2 M parameters)."""
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Dropout(0.25),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10),
    ])
