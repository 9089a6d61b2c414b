"""Gradient compression on the wire (Horovod's Compression): none, fp16, bf16
(kolo/compression.py) for torch tensors."""
import torch

from kolo.compression import Compressor, NoneCompressor, cast_compressor, compression_class  # noqa: F401


def _cast(tensor, dtype):
    return tensor.to(dtype)


FP16Compressor = cast_compressor("FP16Compressor", torch.float16, torch.is_floating_point, _cast)
BF16Compressor = cast_compressor("BF16Compressor", torch.bfloat16, torch.is_floating_point, _cast)
Compression = compression_class(FP16Compressor, BF16Compressor)
