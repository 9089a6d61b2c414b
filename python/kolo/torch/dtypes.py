"""torch dtypes and reduction ops as kolo's codes, and the checks every
collective makes on its tensors.

kolo's engine has seven element types (f32 f64 f16 bf16 i32 i64 u8). The
three more that Horovod accepts are mapped here, exactly:
  * int8, int16 — data movement (broadcast, allgather, alltoall) moves their
    bytes as u8; reductions widen to i32 and narrow back. Narrowing wraps
    modulo 2^8/2^16, which is what an int8/int16 sum or product would give, and
    min/max are exact.
  * bool — moved as u8; reduced as u8 with sum and max as logical OR and
    product and min as logical AND (Horovod's bool sum is also an OR).
Average of an integer tensor is a sum followed by division rounded toward
zero, as in Horovod (its test_horovod_join_allreduce expects it); Average of a bool tensor is an error; any other dtype is an error
naming it.
"""
import torch

from kolo import _C
from kolo.basics import error
# One home for the ops (kolo.tensorflow shares them); re-exported here.
from kolo.reduce_ops import (ReduceOp, Sum, Average, Min, Max, Product, Adasum,  # noqa: F401
                             op_code)

_NATIVE = {
    torch.float32: _C.F32, torch.float64: _C.F64, torch.float16: _C.F16,
    torch.bfloat16: _C.BF16, torch.int32: _C.I32, torch.int64: _C.I64, torch.uint8: _C.U8,
}
_WIDENED = {torch.int8: torch.int32, torch.int16: torch.int32}
SUPPORTED = ("float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool")


def check_tensor(what, t, name=None):
    """Refuses what kolo cannot read in place: non-tensors, devices other than
    the CPU and CUDA (CUDA only where kolo was built with it), strided views."""
    label = f" '{name}'" if name else ""
    if not isinstance(t, torch.Tensor):
        raise TypeError(error(what, f"expected a torch.Tensor{label}, got {type(t).__name__}"))
    if t.device.type == "cuda":
        if not _C.cuda_built():
            raise ValueError(error(what, f"tensor{label} is on {t.device}, but this kolo was built "
                                   "without CUDA (rebuild it where the CUDA toolkit is installed, "
                                   "or move the tensor with .cpu())"))
    elif t.device.type != "cpu":
        raise ValueError(error(what, f"tensor{label} is on device {t.device}; kolo handles CPU "
                               "and CUDA tensors (move it with .cpu())"))
    if t.dtype not in _NATIVE and t.dtype not in _WIDENED and t.dtype != torch.bool:
        raise TypeError(error(what, f"tensor{label} has dtype {t.dtype}, which kolo does not "
                              f"support (supported: {SUPPORTED})"))
    if not t.is_contiguous():
        raise ValueError(error(what, f"tensor{label} is not contiguous (shape {tuple(t.shape)}, "
                               f"strides {t.stride()}); pass tensor.contiguous()"))


_HOST = {}


def place(t):
    """Where t's memory is, as kolo._C's collectives take it (device=, stream=):
    nothing for a CPU tensor; for a CUDA tensor its device and torch's current
    stream there, on which the collective is ordered as a kernel would be (it
    reads t after the work queued there before it; work queued after it sees
    its result)."""
    if t.device.type != "cuda":
        return _HOST
    return {"device": t.device.index, "stream": torch.cuda.current_stream(t.device).cuda_stream}


def through_host(src, dst):
    """(src, dst, back) for an operation of kolo's that takes host memory
    only (kolo.h): a CUDA src is copied to the CPU now (after the work queued
    on the current stream, as torch's .cpu() is) and dst gets a CPU twin (src's
    copy where dst is src), which back() copies into dst. On the CPU: src, dst
    and no back."""
    if not src.is_cuda:
        return src, dst, None
    hs = src.cpu()
    hd = hs if dst is src else torch.empty(dst.shape, dtype=dst.dtype, device="cpu")
    return hs, hd, lambda: dst.copy_(hd)


def move_code(t):
    """(dtype code, element count) for moving t's bytes unchanged."""
    code = _NATIVE.get(t.dtype)
    if code is not None:
        return code, t.numel()
    return _C.U8, t.numel() * t.element_size()


def reduce_plan(what, t, op):
    """How to reduce t with op: (work dtype or None if native, dtype code, op code).

    Raises a clear error for combinations kolo cannot do exactly."""
    code = op_code(what, op)
    if t.dtype == torch.bool:
        if code == _C.AVERAGE:
            raise TypeError(error(what, "op Average is not defined for bool tensors"))
        code = {_C.SUM: _C.MAX, _C.PRODUCT: _C.MIN}.get(code, code)
        return torch.uint8, _C.U8, code
    wide = _WIDENED.get(t.dtype)
    # Average of an integer tensor stays AVERAGE here: the caller sums and
    # divides rounding toward zero, as Horovod does (kolo's C++ API refuses integer averages).
    return wide, _NATIVE[wide or t.dtype], code
