"""SyncBatchNorm: batch normalization whose statistics cover the batch of every rank, with
Horovod's module, names and gradients.

Forward (training): each rank computes its per-channel count, mean and inverse standard
deviation; the ranks all-gather them (names ``sync_batch_norm.count|mean|invstd``, as in
Horovod) and combine them into the global mean and variance, which normalize the input and update
the running statistics. Backward: the per-channel sums of the gradient and of gradient times
centred input are all-reduced, and each rank computes its input's gradient from them; the weight
and bias gradients stay local (the DistributedOptimizer averages them).

Unlike Horovod's, which needs CUDA tensors, this one runs on CPU tensors too: its arithmetic is
plain torch operations rather than the CUDA-only batch-norm kernels.
"""

from __future__ import annotations

import torch
from torch.nn import functional
from torch.nn.modules.batchnorm import _BatchNorm

from ringcomm.torch import handles, state
from ringcomm.torch.collectives import allgather, allreduce
from ringcomm.torch.reduce_ops import Sum


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous version of N-dimensional BatchNorm: normalization statistics are
    computed over the batches of every rank during the forward pass (see
    ``torch.nn.BatchNorm2d`` for the arguments)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _run_bn(self, input):
        return functional.batch_norm(
            input,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            self.momentum,
            self.eps,
        )

    def _momentum(self) -> float:
        # momentum=None: a cumulative average, as torch's BatchNorm does.
        if self.momentum is None:
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def forward(self, input):
        """Normalizes ``input`` (N, C, ...) per channel C. Training: with the mean and variance
        of every rank's batch, which also update the running statistics; evaluation (with
        running statistics) or one rank: as torch's BatchNorm, without communication."""
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
        if not self.training and self.track_running_stats:
            return self._run_bn(input)
        if state.size() == 1:
            return self._run_bn(input)
        return _SyncBatchNormFunction.apply(
            input,
            self.weight,
            self.bias,
            self.running_mean,
            self.running_var,
            self.eps,
            self._momentum(),
        )


def _per_channel(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-channel vector shaped to broadcast against an (N, C, ...) tensor."""
    return values.reshape((1, -1) + (1,) * (like.dim() - 2))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        input = input.contiguous()
        wide = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        reduced_dims = [0] + list(range(2, input.dim()))
        count = torch.tensor([[input.numel() // input.size(1)]])
        var, mean = torch.var_mean(wide, dim=reduced_dims, unbiased=False)
        invstd = torch.rsqrt(var + eps)

        count_handle = allgather.allgather_async(count, name="sync_batch_norm.count")
        mean_handle = allgather.allgather_async(mean.unsqueeze(0), name="sync_batch_norm.mean")
        invstd_handle = allgather.allgather_async(
            invstd.unsqueeze(0), name="sync_batch_norm.invstd"
        )
        counts = handles.synchronize(count_handle).view(-1, 1).to(wide.dtype)
        means = handles.synchronize(mean_handle)
        invstds = handles.synchronize(invstd_handle)

        # Combine: a rank without rows (count 0) weighs nothing, whatever its statistics hold.
        total = counts.sum()
        weights = counts / total
        mean = (weights * torch.where(counts > 0, means, 0.0)).sum(0)
        variances = 1.0 / invstds.square() - eps
        spread = torch.where(counts > 0, variances + (means - mean).square(), 0.0)
        var = (weights * spread).sum(0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean.dtype))
        if running_var is not None:
            unbiased = var * total / (total - 1).clamp(min=1)
            running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))

        ctx.save_for_backward(input, weight, mean, invstd, total)
        normalized = (wide - _per_channel(mean, wide)) * _per_channel(invstd, wide)
        if weight is not None:
            normalized = normalized * _per_channel(weight, wide)
        if bias is not None:
            normalized = normalized + _per_channel(bias, wide)
        return normalized.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        input, weight, mean, invstd, total = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[0:3]
        wide = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        dy = grad_output.to(wide.dtype)
        reduced_dims = [0] + list(range(2, input.dim()))
        centred = wide - _per_channel(mean, wide)
        sum_dy = dy.sum(reduced_dims)
        sum_dy_xmu = (dy * centred).sum(reduced_dims)
        grad_input = grad_weight = grad_bias = None
        if weight is not None and need_weight:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if weight is not None and need_bias:
            grad_bias = sum_dy.to(weight.dtype)
        if need_input:
            # The other ranks' rows depend on this rank's through the shared mean and variance.
            sum_dy_handle = allreduce.allreduce_async(sum_dy, op=Sum, name="sync_batch_norm.sum_dy")
            sum_dy_xmu_handle = allreduce.allreduce_async(
                sum_dy_xmu, op=Sum, name="sync_batch_norm.sum_dy_xmu"
            )
            mean_dy = handles.synchronize(sum_dy_handle) / total
            mean_dy_xmu = handles.synchronize(sum_dy_xmu_handle) / total
            scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
            grad_input = (
                (
                    dy
                    - _per_channel(mean_dy, dy)
                    - centred * _per_channel(invstd.square() * mean_dy_xmu, dy)
                )
                * _per_channel(scale, dy)
            ).to(input.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None
