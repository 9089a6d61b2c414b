"""kolo::data's cache files (kolo/data/cache.h) from Python: read and write.

The same file as the C++ ``build_cache`` writes and ``Cache::open`` maps, so a
cache built by Python (e.g. a ray.data pipeline, examples/ray/) trains the
C++ trainer, and one built by ``fashion_mnist_preprocess`` feeds a Python
trainer. Format (kolo_data/src/data_cache_format.h), little-endian:

  header, 4096 bytes: magic "KOLOCACH", version 1, header bytes, sample count,
    inputs fingerprint, index offset, file size, CRC-32 of [4096, end),
    dtype, dimensions, transform length, shape (8 x i64), transform name,
    and at 4092 the CRC-32 of [0, 4092)
  records in sample order, each at a 64-byte aligned offset (zero padding)
  index: per sample {u64 offset, u64 length, i64 label}

Nothing depends on who wrote it: the same spec and records give the same
bytes, which is how a Python-built cache is checked against the C++ one.
NumPy only (no torch): ``torch.from_numpy(cache.records())`` makes tensors.
"""
import hashlib
import os
import secrets
import struct
import zlib
from dataclasses import dataclass

import numpy as np

MAGIC = b"KOLOCACH"
VERSION = 1
HEADER_BYTES = 4096
ALIGN = 64
INDEX_ENTRY_BYTES = 24
MAX_DIMS = 8
MAX_TRANSFORM = 255
# kolo::DType's codes (include/kolo/kolo.h). bf16 has no NumPy type: its
# records read as uint16 bit patterns.
DTYPES = ("f32", "f64", "f16", "bf16", "i32", "i64", "u8")
_NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16,
          "i32": np.int32, "i64": np.int64, "u8": np.uint8}
_FIXED = struct.Struct("<8sIIQQQQIBBH")  # the header's fields up to the shape (56 bytes)
_SHAPE_AT, _TRANSFORM_AT, _HEADER_CRC_AT = 56, 120, HEADER_BYTES - 4


class CacheError(RuntimeError):
    """A cache file that cannot be used (names the file and the problem)."""


def _align_up(x):
    return (x + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class CacheSpec:
    """What a cache holds (kolo::data::CacheSpec); stored in its header."""
    num_samples: int
    transform: str
    inputs: int
    dtype: str = "u8"
    shape: tuple = ()

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"cache spec: dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if len(self.transform.encode()) > MAX_TRANSFORM:
            raise ValueError(f"cache spec: the transform name has {len(self.transform.encode())} bytes, "
                             f"at most {MAX_TRANSFORM} fit")
        if len(self.shape) > MAX_DIMS or any(d < 0 for d in self.shape):
            raise ValueError(f"cache spec: shape {list(self.shape)} must have at most {MAX_DIMS} "
                             "non-negative dimensions")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def record_bytes(self):
        """Bytes of every record, or 0 when the spec has no shape (records vary)."""
        if not self.shape:
            return 0
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(_NUMPY[self.dtype]).itemsize

    def describe(self):
        return f"[{', '.join(map(str, self.shape))}] {self.dtype}"

    def difference(self, want):
        """"" when equal, else the first difference (as the C++ spec_difference)."""
        if self.transform != want.transform:
            return f"transform '{self.transform}' != '{want.transform}'"
        if self.inputs != want.inputs:
            return f"inputs fingerprint {self.inputs:016x} != {want.inputs:016x}"
        if self.num_samples != want.num_samples:
            return f"{self.num_samples} samples != {want.num_samples}"
        if (self.dtype, self.shape) != (want.dtype, want.shape):
            return f"records {self.describe()} != {want.describe()}"
        return ""


class InputHash:
    """kolo::data::InputHash: a 64-bit BLAKE2b digest of the inputs, fed the
    same way (numbers as u64 little-endian, texts length-prefixed, files as
    contents then length), so Python and C++ fingerprint inputs alike."""

    def __init__(self):
        self._h = hashlib.blake2b(digest_size=8)

    def bytes(self, data):
        self._h.update(data)
        return self

    def number(self, v):
        return self.bytes(int(v).to_bytes(8, "little"))

    def text(self, s):
        b = s.encode()
        return self.number(len(b)).bytes(b)

    def file(self, path):
        total = 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                self._h.update(chunk)
                total += len(chunk)
        return self.number(total)

    def value(self):
        return int.from_bytes(self._h.copy().digest(), "little")


def _encode_header(spec, index_offset, file_size, payload_crc):
    h = bytearray(HEADER_BYTES)
    transform = spec.transform.encode()
    _FIXED.pack_into(h, 0, MAGIC, VERSION, HEADER_BYTES, spec.num_samples, spec.inputs, index_offset,
                     file_size, payload_crc, DTYPES.index(spec.dtype), len(spec.shape), len(transform))
    struct.pack_into(f"<{len(spec.shape)}q", h, _SHAPE_AT, *spec.shape)
    h[_TRANSFORM_AT:_TRANSFORM_AT + len(transform)] = transform
    struct.pack_into("<I", h, _HEADER_CRC_AT, zlib.crc32(h[:_HEADER_CRC_AT]))
    return bytes(h)


def _decode_header(path, m, verify):
    """(spec, index_offset) of the mapped file m; CacheError if it is not a usable cache."""
    size = len(m)
    if size < len(MAGIC) or bytes(m[:len(MAGIC)]) != MAGIC:
        raise CacheError(f"'{path}' is not a kolo cache (it does not start with \"KOLOCACH\"; {size} bytes)")
    if size < HEADER_BYTES:
        raise CacheError(f"cache '{path}' is truncated: {size} bytes, shorter than the {HEADER_BYTES}-byte header")
    if struct.unpack_from("<I", m, _HEADER_CRC_AT)[0] != zlib.crc32(m[:_HEADER_CRC_AT]):
        raise CacheError(f"cache '{path}' is corrupt: the header's CRC-32 does not match")
    (_, version, header_bytes, n, inputs, index_offset, file_size, payload_crc, dtype, ndim,
     tlen) = _FIXED.unpack_from(m, 0)
    if version != VERSION:
        raise CacheError(f"cache '{path}' has format version {version}; this kolo reads version {VERSION}")
    if (dtype >= len(DTYPES) or ndim > MAX_DIMS or tlen > MAX_TRANSFORM or header_bytes != HEADER_BYTES
            or index_offset < HEADER_BYTES or index_offset % ALIGN
            or file_size != index_offset + INDEX_ENTRY_BYTES * n):
        raise CacheError(f"cache '{path}' is corrupt: the header's fields are inconsistent")
    if size != file_size:
        raise CacheError(f"cache '{path}' is {'truncated' if size < file_size else 'corrupt'}: the header "
                         f"says {file_size} bytes, the file has {size}")
    if verify and zlib.crc32(m[HEADER_BYTES:]) != payload_crc:
        raise CacheError(f"cache '{path}' is corrupt: the CRC-32 of its records and index does not match "
                         "the header's")
    spec = CacheSpec(n, bytes(m[_TRANSFORM_AT:_TRANSFORM_AT + tlen]).decode(), inputs, DTYPES[dtype],
                     struct.unpack_from(f"<{ndim}q", m, _SHAPE_AT))
    return spec, index_offset


class Cache:
    """A read-only memory map of a cache file (kolo::data::Cache::open).
    transform / inputs: expected spec fields; a cache that differs is stale."""

    def __init__(self, path, verify=True, transform=None, inputs=None):
        self.path = os.fspath(path)
        try:
            m = np.memmap(self.path, dtype=np.uint8, mode="r") if os.path.getsize(self.path) else \
                np.zeros(0, np.uint8)
        except OSError as e:
            raise CacheError(f"cannot open cache '{self.path}': {e.strerror or e}") from None
        self.spec, index_offset = _decode_header(self.path, m, verify)
        self._map = m
        n = self.spec.num_samples
        index = np.frombuffer(m, dtype="<u8", count=3 * n, offset=index_offset).reshape(n, 3)
        self._offsets, self._lengths = index[:, 0], index[:, 1]
        self._labels = index[:, 2].view("<i8")
        want = self.spec.record_bytes
        bad = ((self._offsets < HEADER_BYTES) | (self._offsets % ALIGN != 0) | (self._offsets > index_offset)
               | (self._lengths > index_offset - np.minimum(self._offsets, index_offset)))
        if self.spec.shape:
            bad |= self._lengths != want
        if bad.any():
            i = int(np.argmax(bad))
            raise CacheError(f"cache '{self.path}' is corrupt: index entry {i} (offset {self._offsets[i]}, "
                             f"{self._lengths[i]} bytes) is out of place")
        expected = CacheSpec(n, transform if transform is not None else self.spec.transform,
                             inputs if inputs is not None else self.spec.inputs, self.spec.dtype, self.spec.shape)
        if diff := self.spec.difference(expected):
            raise CacheError(f"cache '{self.path}' is stale: {diff} (rebuild it)")

    def __len__(self):
        return self.spec.num_samples

    def _check(self, i):
        if not 0 <= i < len(self):
            raise IndexError(f"cache '{self.path}': sample {i} is out of range (it holds {len(self)})")

    def data(self, i):
        """Sample i's record bytes (a read-only view into the map)."""
        self._check(i)
        off = int(self._offsets[i])
        return self._map[off:off + int(self._lengths[i])]

    def record(self, i):
        """Sample i as an array of the spec's dtype and shape (1-D without a shape)."""
        a = self.data(i).view(_NUMPY[self.spec.dtype])
        return a.reshape(self.spec.shape) if self.spec.shape else a

    def label(self, i):
        self._check(i)
        return int(self._labels[i])

    def labels(self):
        return np.array(self._labels)

    def records(self):
        """All records as one read-only ``(n, *shape)`` view (records lie at a
        fixed 64-aligned stride when the spec has a shape)."""
        if not self.spec.shape:
            raise CacheError(f"cache '{self.path}': records differ in length (no shape); use record(i)")
        n, base = len(self), int(self._offsets[0]) if len(self) else HEADER_BYTES
        stride = _align_up(max(self.spec.record_bytes, 1))
        if n and not np.array_equal(self._offsets, base + stride * np.arange(n, dtype=np.uint64)):
            raise CacheError(f"cache '{self.path}': records are not at a fixed stride")
        item = np.dtype(_NUMPY[self.spec.dtype]).itemsize
        inner = np.cumprod((1,) + self.spec.shape[:0:-1])[::-1] * item
        return np.lib.stride_tricks.as_strided(
            self._map[base:].view(_NUMPY[self.spec.dtype]) if n else np.zeros(0, _NUMPY[self.spec.dtype]),
            shape=(n,) + self.spec.shape, strides=(stride,) + tuple(int(s) for s in inner), writeable=False)


class CacheWriter:
    """Writes a cache in sample order, atomically (kolo::data's CacheWriter):
    a temporary file in the target's directory, renamed over the target on
    commit(); closed without commit() (an exception in a ``with`` block), the
    temporary file is removed and the target is untouched. A target that
    exists and is not a kolo cache is refused: kolo does not overwrite what
    it did not write."""

    def __init__(self, path, spec):
        self.path, self.spec = os.fspath(path), spec
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                head = f.read(len(MAGIC))
            if head != MAGIC:
                raise CacheError(f"'{self.path}' exists and is not a kolo cache; not overwriting it "
                                 "(remove it or choose another path)")
        # Beside the target (the rename must not cross file systems); mode
        # 0644 less the umask, as the C++ writer's file.
        self._tmp = f"{os.path.abspath(self.path)}.{secrets.token_hex(6)}.partial"
        self._f = os.fdopen(os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), "wb")
        self._f.write(bytes(HEADER_BYTES))  # the header goes in last
        self._pos, self._crc, self._index = HEADER_BYTES, 0, []

    def _write(self, b):
        self._f.write(b)
        self._crc = zlib.crc32(b, self._crc)
        self._pos += len(b)

    def append(self, data, label):
        """The next sample: its record (bytes-like or array) and integer label."""
        if len(self._index) >= self.spec.num_samples:
            raise CacheError(f"cache '{self.path}': more than the spec's {self.spec.num_samples} samples")
        b = np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else bytes(data)
        want = self.spec.record_bytes
        if self.spec.shape and len(b) != want:
            raise CacheError(f"cache '{self.path}': sample {len(self._index)} has {len(b)} bytes; records of "
                             f"{self.spec.describe()} have {want}")
        self._index.append((self._pos, len(b), int(label)))
        self._write(b)
        self._write(bytes(_align_up(self._pos) - self._pos))

    def commit(self):
        """Writes the index and header, and renames the file over the target. Returns its size."""
        if len(self._index) != self.spec.num_samples:
            raise CacheError(f"cache '{self.path}': {len(self._index)} samples written, the spec says "
                             f"{self.spec.num_samples}")
        index_offset = self._pos
        self._write(b"".join(struct.pack("<QQq", *entry) for entry in self._index))
        self._f.seek(0)
        self._f.write(_encode_header(self.spec, index_offset, self._pos, self._crc))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self._tmp, self.path)
        self._tmp = None
        return self._pos

    def close(self):
        """Discards an uncommitted file."""
        if not self._f.closed:
            self._f.close()
        if self._tmp is not None:
            os.unlink(self._tmp)
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
