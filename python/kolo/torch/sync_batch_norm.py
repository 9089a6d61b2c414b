"""SyncBatchNorm: batch normalisation over the global batch of all ranks.

Horovod's ``hvd.SyncBatchNorm`` (and torch 1.13's ``nn.SyncBatchNorm``) run on
GPUs only; this one is the same computation on kolo's communicator, on CPU
and CUDA tensors (the statistics live on the input's device). In
training, the statistics are those of the concatenation of every rank's batch
(ranks may hold different numbers of samples, also none), so N ranks with
batch b give what BatchNorm gives one process with batch N*b:

forward   one allreduce (f64) of [count, sum x, sum x^2] per channel. Each
          rank derives its sums from a two-pass local mean and variance, and
          the global variance is formed in f64, so the E[x^2] - E[x]^2 step
          loses nothing that a float32 BatchNorm would keep. Running
          statistics use the unbiased variance over the global count.
backward  one allreduce (f64) of [sum dy, sum dy*(x-mean)] per channel, from
          which every rank computes its input gradient. Weight and bias
          gradients are this rank's share, reduced afterwards like every other
          gradient by DistributedOptimizer or DDP (as in Horovod and torch).

Every rank must run forward and backward of its SyncBatchNorm layers in the
same order (they are collectives). In eval mode with running statistics, or
on one rank, it is plain BatchNorm.
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from kolo import _C, basics
from kolo.basics import error
from kolo.torch import dtypes


def _allreduce_sum(buf):
    """In place over all ranks; buf is a contiguous float64 tensor (CPU or CUDA)."""
    basics.comm().allreduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), _C.F64, _C.SUM,
                            **dtypes.place(buf))


def _compute_dtype(t):
    # CPU kernels for f16/bf16 batch norm are missing in some torch releases.
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


class _SyncBatchNormFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        xc = x.to(_compute_dtype(x))
        count = x.numel() // channels if channels else 0
        stats = torch.zeros(1 + 2 * channels, dtype=torch.float64, device=x.device)
        if count:
            var, mean = torch.var_mean(xc, dim=dims, unbiased=False)
            mean, var = mean.double(), var.double()
            stats[0] = count
            stats[1:1 + channels] = mean * count
            stats[1 + channels:] = (var + mean * mean) * count
        _allreduce_sum(stats)
        total = int(stats[0].item())
        if total <= 1:
            raise ValueError(error("SyncBatchNorm", f"expected more than 1 value per channel over all "
                                   f"ranks when training, got {total}"))
        mean = stats[1:1 + channels] / total
        var = (stats[1 + channels:] / total - mean * mean).clamp_(min=0)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = var * (total / (total - 1))
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        mean, var = mean.to(xc.dtype), var.to(xc.dtype)
        y = F.batch_norm(xc, mean, var, weight, bias, False, 0.0, eps).to(x.dtype)
        ctx.save_for_backward(x, weight, mean, torch.rsqrt(var + eps))
        ctx.total = total
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, invstd = ctx.saved_tensors
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, channels] + [1] * (x.dim() - 2)
        xc, dyc = x.to(mean.dtype), dy.to(mean.dtype)
        xmu = xc - mean.view(shape)
        sum_dy = dyc.sum(dims)
        sum_dy_xmu = (dyc * xmu).sum(dims)
        sums = torch.cat([sum_dy, sum_dy_xmu]).double().contiguous()
        _allreduce_sum(sums)  # every rank, even one that needs no input gradient
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            mean_dy = (sums[:channels] / ctx.total).to(xc.dtype).view(shape)
            mean_dy_xmu = (sums[channels:] / ctx.total).to(xc.dtype).view(shape)
            inv = invstd.view(shape)
            scale = inv if weight is None else inv * weight.view(shape).to(xc.dtype)
            grad_x = ((dyc - mean_dy - xmu * inv * inv * mean_dy_xmu) * scale).to(x.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_w = (sum_dy_xmu * invstd).to(weight.dtype)
        if ctx.needs_input_grad[2]:
            grad_b = sum_dy.to(dy.dtype)
        return grad_x, grad_w, grad_b, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation whose training statistics span every rank's batch.

    Arguments as ``hvd.SyncBatchNorm`` and ``torch.nn.BatchNorm*d``; input of
    shape (N, C) or (N, C, ...). Needs ``hvd.init()`` (or
    ``init_process_group("kolo")``) first."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        batch_stats = self.training or not self.track_running_stats
        if not batch_stats:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                False, 0.0, self.eps)
        if basics.comm().size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                True, factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, self.running_mean,
                                            self.running_var, self.eps, factor)
