"""Gradient compression on the wire (Horovod's Compression: none, fp16, bf16),
for every framework layer: each passes how it tests and casts its tensors.

compress(tensor) -> (tensor to send, context); decompress(tensor, context)
-> tensor in the original dtype. Only floating tensors are cast."""


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


def cast_compressor(name, wire, is_floating, cast):
    """A Compressor that sends floating tensors as dtype wire: is_floating(t)
    says which are, cast(t, dtype) converts."""
    class Cast(Compressor):
        @staticmethod
        def compress(tensor):
            if is_floating(tensor) and tensor.dtype != wire:
                return cast(tensor, wire), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else cast(tensor, ctx)
    Cast.__name__ = Cast.__qualname__ = name
    return Cast


def compression_class(fp16, bf16):
    class Compression:
        """hvd.Compression.none / .fp16 / .bf16"""
        none = NoneCompressor
    Compression.fp16, Compression.bf16 = fp16, bf16
    return Compression
