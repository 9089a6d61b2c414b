"""The differentiable collectives (torch.autograd.Function), as in Horovod.

The backward passes are Horovod's own (horovod/torch/mpi_ops.py), so a
program written for Horovod computes the same gradients on kolo:
  allreduce(x, op)       -> allreduce(grad, op) with the same scale factors
  allgather(x)           -> this rank's rows of allreduce(grad, Average)
  broadcast(x, root)     -> allreduce(grad, Average) on root, zeros elsewhere
  alltoall(x, splits)    -> alltoall(grad, received_splits)
  reducescatter(x, op)   -> allgather(grad * prescale * postscale), times
                            size for op=Sum (Average: not divided)
Note that allgather's and broadcast's are averages over ranks, not the
gradient of the sum of the ranks' losses (a factor of size apart).
Min/Max/Product have no gradient here (an error names them). The backward
collectives are issued in backward order, which is the same on every rank
for the same graph — kolo matches them by call order.

When no gradient is needed the functions skip autograd entirely (the
per-call cost of Function.apply is several microseconds).
"""
import torch

from kolo import _C
from kolo.basics import comm, error, rank
from kolo.process_sets import follows_process_set, with_process_set
from kolo.torch import collectives as col
from kolo.torch.compression import Compression
from kolo.torch.dtypes import Average, op_code


def _needs_grad(t):
    return t.requires_grad and torch.is_grad_enabled()


def _reduce_compressed(function, nograd, tensor, compression, op, prescale, postscale, name):
    """compress, reduce (through autograd only if a gradient is needed), decompress."""
    compression = compression or Compression.none
    sent, cctx = compression.compress(tensor)
    run = function.apply if _needs_grad(sent) else nograd
    return compression.decompress(run(sent, op, prescale, postscale, name), cctx)


def _grad_op(what, op):
    """The op's code if it has a gradient (Sum, Average), else an error."""
    code = op_code(what, op)
    if code not in (_C.SUM, _C.AVERAGE):
        raise RuntimeError(error(what, f"op {op!r} has no gradient (only Sum and Average do)"))
    return code


@follows_process_set
class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, prescale, postscale, name):
        ctx.op, ctx.pre, ctx.post = op, prescale, postscale
        return col.allreduce_nograd(tensor, op, prescale, postscale, name)

    @staticmethod
    def backward(ctx, grad):
        _grad_op("allreduce backward", ctx.op)
        g = col.allreduce_nograd(grad.contiguous(), ctx.op, ctx.pre, ctx.post, what="allreduce backward")
        return g, None, None, None, None


@with_process_set
def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """A new tensor: the reduction of tensor over all ranks (differentiable)."""
    op = col.resolve_op("allreduce", average, op)
    return _reduce_compressed(_Allreduce, col.allreduce_nograd, tensor, compression, op,
                              prescale_factor, postscale_factor, name)


@with_process_set
def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """allreduce of each tensor of a list (differentiable); returns the list."""
    op = col.resolve_op("grouped_allreduce", average, op)
    if not any(_needs_grad(t) for t in tensors):
        compression = compression or Compression.none
        sent = [compression.compress(t) for t in tensors]
        outs = col.synchronize(col.grouped_allreduce_async([s for s, _ in sent], None, name, op,
                                                          prescale_factor, postscale_factor))
        return [compression.decompress(o, c) for o, (_, c) in zip(outs, sent)]
    return [allreduce(t, None, name, compression, op, prescale_factor, postscale_factor)
            for t in tensors]


@follows_process_set
class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.scalar = tensor.dim() == 0
        return col.allgather_nograd(tensor, name)

    @staticmethod
    def backward(ctx, grad):
        summed = col.allreduce_nograd(grad.contiguous(), Average, what="allgather backward")
        rows = col.allgather_nograd(torch.tensor([ctx.rows], dtype=torch.int64))
        offset = int(rows[:comm().rank()].sum())
        g = summed.narrow(0, offset, ctx.rows)
        return (g.reshape(()) if ctx.scalar else g), None


@with_process_set
def allgather(tensor, name=None, process_set=None):
    """Concatenation over ranks along dim 0 (first dimensions may differ; differentiable)."""
    if _needs_grad(tensor):
        return _Allgather.apply(tensor, name)
    return col.allgather_nograd(tensor, name)


@with_process_set
def grouped_allgather(tensors, name=None, process_set=None):
    return [allgather(t, name) for t in tensors]


@follows_process_set
class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root = root_rank
        return col.broadcast_nograd(tensor, root_rank, name)

    @staticmethod
    def backward(ctx, grad):
        g = col.allreduce_nograd(grad.contiguous(), Average, what="broadcast backward")
        if rank() != ctx.root:  # root_rank is a global rank, also in a process set
            g.zero_()
        return g, None, None


@with_process_set
def broadcast(tensor, root_rank, name=None, process_set=None):
    """A new tensor holding root_rank's tensor (differentiable)."""
    if _needs_grad(tensor):
        return _Broadcast.apply(tensor, root_rank, name)
    return col.broadcast_nograd(tensor, root_rank, name)


@follows_process_set
class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name):
        out, received = col.alltoall_nograd(tensor, splits, name)
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        g, _ = col.alltoall_nograd(grad.contiguous(), ctx.received, name=None)
        return g, None, None


@with_process_set
def alltoall(tensor, splits=None, name=None, process_set=None):
    """Rows splits[j] go to rank j (equal parts when splits is None).

    Returns the received rows; with splits given, (output, received_splits)
    as in Horovod. Differentiable."""
    if _needs_grad(tensor):
        out, received = _Alltoall.apply(tensor, splits, name)
    else:
        out, received = col.alltoall_nograd(tensor, splits, name)
    return out if splits is None else (out, received)


@follows_process_set
class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, prescale, postscale, name):
        ctx.op, ctx.pre, ctx.post = op, prescale, postscale
        return col.reducescatter_nograd(tensor, op, prescale, postscale, name)

    @staticmethod
    def backward(ctx, grad):
        code = _grad_op("reducescatter backward", ctx.op)
        g = col.allgather_nograd(grad.contiguous())
        scale = ctx.pre * ctx.post * (comm().size() if code == _C.SUM else 1)
        return (g * scale if scale != 1 else g), None, None, None, None


@with_process_set
def reducescatter(tensor, name=None, compression=None, op=Average, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=None):
    """Reduces over ranks and keeps this rank's rows of dim 0 (lower ranks get
    the remainder when it does not divide). Differentiable."""
    return _reduce_compressed(_Reducescatter, col.reducescatter_nograd, tensor, compression, op,
                              prescale_factor, postscale_factor, name)


@with_process_set
def grouped_reducescatter(tensors, name=None, compression=None, op=Average, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=None):
    return [reducescatter(t, name, compression, op, prescale_factor, postscale_factor)
            for t in tensors]

