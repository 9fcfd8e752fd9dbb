"""Horovod's prescale, postscale and Average on torch tensors: which factors libhvdrun applies
and which are applied here, in the tensor's own dtype (Horovod's ScaleBuffer)."""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence

import torch

from hvdrun._basics import size
from hvdrun.torch._arguments import Average, Sum

def _scale(t: torch.Tensor, factor: float, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """t * factor in t's own dtype, as Horovod's ScaleBuffer on CPUs: a float32 or float64
    tensor in its precision, a 16-bit float one in float32 (torch would round the factor to
    the 16-bit type), an integer one through float64, truncated toward zero (copy_ casts as
    C does)."""
    if out is None:
        out = torch.empty_like(t, memory_format=torch.contiguous_format)
    if t.is_floating_point() and t.element_size() == 2:
        return out.copy_(t.float().mul_(factor))
    if t.is_floating_point():
        return torch.mul(t, factor, out=out)
    return out.copy_(t.double().mul_(factor))


class _Scaling(NamedTuple):
    send: torch.Tensor  # what goes to libhvdrun: the tensor, or its prescaled copy (same dtype)
    op: int  # the op to submit
    prescale: float  # the factors libhvdrun applies
    postscale: float
    after: float  # the factor applied here to the result (1.0: none)


def _scaling(tensor: torch.Tensor, op: int, pre: float, post: float, native: bool,
             n: Optional[int] = None) -> _Scaling:
    """Horovod's prescale, postscale and Average (a sum times postscale / size()) for
    `tensor`. libhvdrun applies them itself (native) to floating allreduces only; an integer
    tensor, and every reducescatter, is scaled here, in its own dtype as Horovod does."""
    if native and tensor.is_floating_point():
        return _Scaling(tensor, op, pre, post, 1.0)
    send = _scale(tensor, pre) if pre != 1.0 else tensor
    if op == Average and not tensor.is_floating_point():
        return _Scaling(send, Sum, 1.0, 1.0, post / (n or size()))  # n: a process set's size
    return _Scaling(send, op, 1.0, 1.0, post)


def _group_scalings(tensors: Sequence[torch.Tensor], op: int, pre: float, post: float,
                    n: Optional[int] = None) -> List[_Scaling]:
    """The scalings of a grouped allreduce, which goes to libhvdrun as one operation with one
    op and one pair of factors: libhvdrun applies them when every tensor is floating; a
    group with an integer tensor is scaled here for all of them (Average as a Sum times
    postscale / size(), as Horovod computes it)."""
    if all(t.is_floating_point() for t in tensors):
        return [_scaling(t, op, pre, post, native=True) for t in tensors]
    if op == Average:
        op, post = Sum, post / (n or size())
    return [_scaling(t, op, pre, post, native=False) for t in tensors]
