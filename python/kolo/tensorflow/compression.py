"""Gradient compression on the wire (Horovod's Compression): none, fp16, bf16
(kolo/compression.py) for tf.Tensors. kolo reduces half types in float32, so
only the wire is narrowed."""
import tensorflow as tf

from kolo.compression import Compressor, NoneCompressor, cast_compressor, compression_class  # noqa: F401

FP16Compressor = cast_compressor("FP16Compressor", tf.float16, lambda t: t.dtype.is_floating, tf.cast)
BF16Compressor = cast_compressor("BF16Compressor", tf.bfloat16, lambda t: t.dtype.is_floating, tf.cast)
Compression = compression_class(FP16Compressor, BF16Compressor)
