"""Gradient compression on the wire (Horovod's Compression): none, fp16, bf16.

compress(tensor) -> (tensor to send, context); decompress(tensor, context)
-> tensor in the original dtype. Only floating tensors are cast."""
import torch


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


def _cast_compressor(wire):
    class Cast(Compressor):
        @staticmethod
        def compress(tensor):
            if tensor.is_floating_point() and tensor.dtype != wire:
                return tensor.to(wire), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.to(ctx)
    return Cast


FP16Compressor = _cast_compressor(torch.float16)
FP16Compressor.__name__ = "FP16Compressor"
BF16Compressor = _cast_compressor(torch.bfloat16)
BF16Compressor.__name__ = "BF16Compressor"


class Compression:
    """hvd.Compression.none / .fp16 / .bf16"""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
