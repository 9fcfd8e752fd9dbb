"""SyncBatchNorm (horovod/torch/sync_batch_norm.py): batch normalization whose statistics
are those of the whole batch across ranks, in training."""

from __future__ import annotations



import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hvdrun.torch.mpi_ops import Sum, allreduce, size


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d. In training mode with more than one rank,
    the mean and variance are taken over every rank's batch: one allreduce of the
    per-channel sums, sums of squares and element count per forward, differentiable (its
    backward is the allreduce of the gradients), so gradients are those of the global
    batch. In eval mode, or on one rank, it is plain batch normalization."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        self._check_input_dim(input)
        if self.momentum is None:
            exponential_average_factor = 0.0
        else:
            exponential_average_factor = self.momentum
        if self.training and self.track_running_stats:
            assert self.num_batches_tracked is not None
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                exponential_average_factor = 1.0 / float(self.num_batches_tracked)
        if not self.training or size() == 1:
            return F.batch_norm(input, self.running_mean if not self.training or self.track_running_stats else None,
                                self.running_var if not self.training or self.track_running_stats else None,
                                self.weight, self.bias, self.training or not self.track_running_stats,
                                exponential_average_factor, self.eps)
        return self._sync_forward(input, exponential_average_factor)

    def _sync_forward(self, input: torch.Tensor, factor: float) -> torch.Tensor:
        c = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        count = torch.full((1,), float(input.numel() // c), dtype=x.dtype, device=x.device)
        stats = torch.cat([x.sum(dims), (x * x).sum(dims), count]).contiguous()
        stats = allreduce(stats, op=Sum)
        total = stats[2 * c]
        mean = stats[:c] / total
        var = (stats[c:2 * c] / total - mean * mean).clamp(min=0)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                n = float(total.item())
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - factor).add_(mean.detach().to(self.running_mean.dtype), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.detach().to(self.running_var.dtype), alpha=factor)
        shape = [1, c] + [1] * (input.dim() - 2)
        out = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out.to(input.dtype)


