"""Fashion-MNIST from Debian's dataset-fashion-mnist as torch datasets.

The package installs the four gzipped IDX files in /usr/share/datasets/
fashion-mnist; gzip and numpy read them. A missing or malformed file is an
error naming it.
"""
import gzip
import os

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # of the training images


def read_idx(path, magic, header):
    """The payload of an IDX file (after its header) as uint8."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SystemExit(f"cannot read {path}: {e} (install dataset-fashion-mnist or pass --data-dir)")
    if len(raw) < header or int.from_bytes(raw[:4], "big") != magic:
        raise SystemExit(f"{path} is not an IDX file of the expected kind (magic {raw[:4].hex()})")
    return np.frombuffer(raw, dtype=np.uint8, offset=header)


def dataset(data_dir, split):
    """split "train" (60,000 images) or "t10k" (10,000): normalised 1x28x28 images and labels."""
    import torch  # here, not above: the TensorFlow examples use read_idx without torch
    import torch.utils.data
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 2051, 16)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 2049, 8)
    x = (torch.from_numpy(images.reshape(-1, 1, 28, 28).astype(np.float32)) / 255.0 - MEAN) / STD
    return torch.utils.data.TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))
