"""examples/fashion_mnist/augment.cc in NumPy, bit for bit, for a batch of samples.

The C++ augmentation draws sample i's randomness from std::mt19937_64 seeded
by std::seed_seq{seed lo, seed hi, i lo, i hi} and then does double
arithmetic; both generators are fully specified by the C++ standard, so this
port reproduces their bits, and it performs the double operations in the C++
order (vectorised over the batch and the pixels, never over a sum's terms)
before the same rounding to float32. The float32 outputs equal the C++ ones
exactly: test_ray.py compares the caches byte for byte (60,000 samples were
also compared once). Two things this relies on, both true of kolo's build:
augment.cc is compiled without -ffast-math and without FMA contraction (no
-march/-mfma: GCC would fuse a*b+c), and the Gaussian kernel uses glibc's
exp (math.exp calls the same libm). Where a double did differ in its last
bit, the float32 result would change only for a value on a rounding
boundary (the blur summed in another order, tried once, changed no sample).
"""
import math

import numpy as np

MEAN, STD = np.float32(0.2860), np.float32(0.3530)  # as augment.cc's kMean, kStd (floats)
KINDS = ("none", "shift", "elastic")
VERSION = 1  # preprocess.cc's kAugmentVersion: names the transform "fashion-mnist/<kind>/v1"


def transform_name(kind):
    return f"fashion-mnist/{kind}/v{VERSION}"


# std::seed_seq::generate ([rand.util.seedseq]) for 624 words: what
# mt19937_64's seed(seed_seq&) asks for (312 states x 2 words).
def _seed_seq(seeds):
    """seeds: (B, s) uint32 -> (B, 624) uint32 words."""
    b, s = seeds.shape
    n, t = 624, 11
    p = (n - t) // 2
    q = p + t
    m = max(s + 1, n)
    x = np.full((b, n), 0x8B8B8B8B, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for k in range(m):
            arg = x[:, k % n] ^ x[:, (k + p) % n] ^ x[:, (k - 1) % n]
            r1 = np.uint32(1664525) * (arg ^ (arg >> np.uint32(27)))
            if k == 0:
                r2 = r1 + np.uint32(s)
            elif k <= s:
                r2 = r1 + np.uint32(k % n) + seeds[:, k - 1]
            else:
                r2 = r1 + np.uint32(k % n)
            x[:, (k + p) % n] += r1
            x[:, (k + q) % n] += r2
            x[:, k % n] = r2
        for k in range(m, m + n):
            arg = x[:, k % n] + x[:, (k + p) % n] + x[:, (k - 1) % n]
            r3 = np.uint32(1566083941) * (arg ^ (arg >> np.uint32(27)))
            r4 = r3 - np.uint32(k % n)
            x[:, (k + p) % n] ^= r3
            x[:, (k + q) % n] ^= r4
            x[:, k % n] = r4
    return x


_N, _M, _A = 312, 156, np.uint64(0xB5026F5AA96619E9)
_UPPER, _LOWER = np.uint64(0xFFFFFFFF80000000), np.uint64(0x7FFFFFFF)


def _twist(x):
    """mt19937_64's state transition, in the three dependent parts of the recurrence."""
    def mix(k, k1, km):
        y = (x[:, k] & _UPPER) | (x[:, k1] & _LOWER)
        return x[:, km] ^ (y >> np.uint64(1)) ^ np.where(y & np.uint64(1), _A, np.uint64(0))
    k = np.arange(_N - _M)
    x[:, k] = mix(k, k + 1, k + _M)  # reads the old x[156:312]
    k = np.arange(_N - _M, _N - 1)
    x[:, k] = mix(k, k + 1, k - (_N - _M))  # reads the new x[0:155]
    x[:, _N - 1] = mix(np.array([_N - 1]), np.array([0]), np.array([_M - 1]))[:, 0]


def _mt19937_64(seed, index, count):
    """The first `count` outputs of std::mt19937_64(std::seed_seq{...}) for each index: (B, count) uint64."""
    index = np.asarray(index, dtype=np.uint64)
    words = _seed_seq(np.stack([np.full(index.shape, seed & 0xFFFFFFFF, np.uint32),
                                np.full(index.shape, (seed >> 32) & 0xFFFFFFFF, np.uint32),
                                (index & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                                (index >> np.uint64(32)).astype(np.uint32)], axis=1)).astype(np.uint64)
    x = words[:, 0::2] | (words[:, 1::2] << np.uint64(32))
    # An all-zero state is impossible from seed_seq in practice; the standard's fix-up, for completeness.
    zero = ((x[:, 0] & _UPPER) == 0) & (x[:, 1:] == 0).all(axis=1)
    x[zero, 0] = np.uint64(1) << np.uint64(63)
    out = []
    for _ in range(-(-count // _N)):
        _twist(x)
        y = x.copy()
        y ^= (y >> np.uint64(29)) & np.uint64(0x5555555555555555)
        y ^= (y << np.uint64(17)) & np.uint64(0x71D67FFFEDA60000)
        y ^= (y << np.uint64(37)) & np.uint64(0xFFF7EEE000000000)
        y ^= y >> np.uint64(43)
        out.append(y)
    return np.concatenate(out, axis=1)[:, :count]


def _uniform(bits):
    """augment.cc's uniform(): [-1, 1) from the top 53 bits (exact conversions)."""
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -52 - 1.0


def _round(x):
    """std::round: halfway cases away from zero (numpy rounds them to even)."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


def _kernel(sigma):
    r = math.ceil(3 * sigma)
    k = [math.exp(-0.5 * i * i / (sigma * sigma)) for i in range(-r, r + 1)]
    total = 0.0
    for v in k:  # the C++ sums sequentially
        total += v
    return r, [v / total for v in k]


def _blur(f, sigma):
    """Separable Gaussian blur with clamped edges of (B, rows, cols) fields; each
    output is summed over the kernel in the C++ order, starting from 0."""
    r, k = _kernel(sigma)
    rows, cols = f.shape[1:]
    tmp = np.zeros_like(f)
    for i in range(-r, r + 1):
        tmp = tmp + k[i + r] * f[:, :, np.clip(np.arange(cols) + i, 0, cols - 1)]
    out = np.zeros_like(f)
    for i in range(-r, r + 1):
        out = out + k[i + r] * tmp[:, np.clip(np.arange(rows) + i, 0, rows - 1), :]
    return out


def augment(pixels, index, kind="elastic", max_shift=2, alpha=1.5, sigma=4.0, seed=42):
    """pixels (B, rows, cols) uint8, index (B,) sample indices -> (B, rows, cols)
    float32, equal to fmnist::augment(pixels[b], rows, cols, index[b], options)."""
    pixels = np.asarray(pixels, dtype=np.uint8)
    b, rows, cols = pixels.shape
    if kind not in KINDS:
        raise ValueError(f"unknown augmentation '{kind}' ({', '.join(KINDS)})")
    if kind == "none":
        return (pixels.astype(np.float32) / np.float32(255) - MEAN) / STD
    n = rows * cols
    bits = _mt19937_64(seed, index, 2 + (2 * n if kind == "elastic" else 0))
    dy = _round(_uniform(bits[:, 0]) * (max_shift + 0.5))[:, None, None]
    dx = _round(_uniform(bits[:, 1]) * (max_shift + 0.5))[:, None, None]
    fy = np.zeros((b, rows, cols))
    fx = np.zeros((b, rows, cols))
    if kind == "elastic":
        fy = _blur(_uniform(bits[:, 2:2 + n]).reshape(b, rows, cols), sigma)
        fx = _blur(_uniform(bits[:, 2 + n:]).reshape(b, rows, cols), sigma)
        m = np.maximum(1e-12, np.maximum(np.abs(fy).max(axis=(1, 2)), np.abs(fx).max(axis=(1, 2))))
        scale = (alpha / m)[:, None, None]
        fy, fx = fy * scale, fx * scale
    y = np.arange(rows, dtype=np.float64)[None, :, None]
    x = np.arange(cols, dtype=np.float64)[None, None, :]
    sy, sx = (y - dy) + fy, (x - dx) + fx
    y0, x0 = np.floor(sy), np.floor(sx)
    wy, wx = sy - y0, sx - x0
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    img = pixels.astype(np.float64) / 255.0
    batch = np.arange(b)[:, None, None]

    def at(yy, xx):  # zero (background) outside the image
        inside = (yy >= 0) & (yy < rows) & (xx >= 0) & (xx < cols)
        return np.where(inside, img[batch, np.clip(yy, 0, rows - 1), np.clip(xx, 0, cols - 1)], 0.0)

    v = (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x0 + 1)) + \
        wy * ((1 - wx) * at(y0 + 1, x0) + wx * at(y0 + 1, x0 + 1))
    return ((v - np.float64(MEAN)) / np.float64(STD)).astype(np.float32)


_loaded = {}


def read_train(data_dir):
    """Fashion-MNIST's training images (n, 28, 28) and labels (n,) as uint8,
    read once per process (each Ray worker reads the files, as each rank of
    fashion_mnist_preprocess does). Errors name the file."""
    if data_dir not in _loaded:
        import gzip
        import os

        def payload(name, magic, header):
            path = os.path.join(data_dir, name)
            try:
                with gzip.open(path, "rb") as f:
                    raw = f.read()
            except OSError as e:
                raise OSError(f"{path}: {e} (install dataset-fashion-mnist or pass --data)") from None
            if len(raw) < header or int.from_bytes(raw[:4], "big") != magic:
                raise ValueError(f"{path}: not an IDX file (expected magic 0x{magic:08x})")
            return raw, np.frombuffer(raw, dtype=np.uint8, offset=header)

        raw, images = payload("train-images-idx3-ubyte.gz", 0x803, 16)
        _, labels = payload("train-labels-idx1-ubyte.gz", 0x801, 8)
        count, rows, cols = (int.from_bytes(raw[o:o + 4], "big") for o in (4, 8, 12))
        if images.size != count * rows * cols or labels.size != count:
            raise ValueError(f"{data_dir}: {labels.size} labels and {images.size} pixels for {count} "
                             f"images of {rows}x{cols}")
        _loaded[data_dir] = images.reshape(count, rows, cols), labels
    return _loaded[data_dir]
