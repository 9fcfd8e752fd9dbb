"""Gradient compression (horovod/torch/compression.py): what DistributedOptimizer and
allreduce(compression=...) send instead of the tensor."""

from __future__ import annotations

from typing import Any, Tuple

import torch


class Compressor:
    """compress(tensor) -> (tensor to send, context); decompress(tensor, context) -> tensor."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends the tensor as it is."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 and casts the result back."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        dtype = tensor.dtype
        if dtype.is_floating_point:
            tensor = tensor.type(torch.float16)
        return tensor, dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        if ctx.is_floating_point:
            tensor = tensor.type(ctx)
        return tensor


class Compression:
    """The compressors: Compression.none and Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
