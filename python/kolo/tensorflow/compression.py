"""Gradient compression on the wire (Horovod's Compression): none, fp16, bf16.

compress(tensor) -> (tensor to send, context); decompress(tensor, context)
-> tensor in the original dtype. Only floating tensors are cast; kolo
reduces half types in float32, so only the wire is narrowed."""
import tensorflow as tf


class Compressor:
    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _cast_compressor(wire, name):
    class Cast(Compressor):
        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating and tensor.dtype != wire:
                return tf.cast(tensor, wire), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tf.cast(tensor, ctx)
    Cast.__name__ = Cast.__qualname__ = name
    return Cast


FP16Compressor = _cast_compressor(tf.float16, "FP16Compressor")
BF16Compressor = _cast_compressor(tf.bfloat16, "BF16Compressor")


class Compression:
    """hvd.Compression.none / .fp16 / .bf16"""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
