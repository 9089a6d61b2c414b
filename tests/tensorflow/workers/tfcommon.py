"""Shared by the kolo.tensorflow workers that pytest starts under kolorun.

Inputs are deterministic functions of (rank, dtype, size), so every rank
computes every rank's input and the expected result itself, in Python
integers or float64 — independently of kolo."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's start-up banner is noise here

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32, tf.int64, tf.uint8,
          tf.int8, tf.int16, tf.uint16, tf.bool]
FLOATS = {tf.float32, tf.float64, tf.float16, tf.bfloat16}
BITS = {tf.int8: 8, tf.int16: 16, tf.int32: 32, tf.int64: 64, tf.uint8: 8, tf.uint16: 16}
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise AssertionError(f"rank {os.environ.get('KOLO_RANK', '?')}: check failed: {what}")


def values(rank, dtype, n):
    """Python numbers: rank's input of n elements (small, exact in every
    dtype; products of 3 ranks stay below 2^11; negatives for signed types)."""
    if dtype == tf.bool:
        return [((i + rank) % 3) == 0 for i in range(n)]
    base = [((i * 7 + rank * 13) % 11) + 1 for i in range(n)]
    if dtype not in (tf.uint8, tf.uint16):
        base = [v - 4 for v in base]
    return base


def tensor(vals, dtype):
    return tf.constant(np.array(vals, dtype=dtype.as_numpy_dtype), dtype=dtype)


def wrap(v, dtype):
    """Two's-complement wrap of a Python int into dtype's range."""
    bits = BITS[dtype]
    v %= 1 << bits
    if dtype.is_unsigned is False and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def same(got, want, dtype, tol=None):
    """got (a tf.Tensor) equals the Python reference values (exact unless tol)."""
    got = tf.convert_to_tensor(got)
    if got.dtype != dtype:
        return False
    g = np.asarray(got).reshape(-1)
    if g.size != len(want):
        return False
    if tol is None:
        return g.tolist() == list(want)
    return bool(np.allclose(g.astype(np.float64), np.array(want, np.float64), rtol=tol, atol=tol))


def done(name):
    print(f"{name}: OK ({checks} checks)", flush=True)
    sys.stdout.flush()


def say(line):
    """One line in one write(2): the elastic workers' lines must come out whole."""
    os.write(1, (line + "\n").encode())


def write_json(path, obj):
    """obj as JSON at path, whole or not at all (a temporary file renamed)."""
    import json
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.rename(path + ".tmp", path)
