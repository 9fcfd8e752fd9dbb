"""Horovod's grouped_allgather and grouped_reducescatter (horovod/torch/mpi_ops.py): a list
of tensors, each gathered or reduce-scattered as hvd.allgather / hvd.reducescatter does it,
under one handle. Every tensor is checked before the first is submitted, so a refused call
leaves no rank waiting; the parts are named after the group (its name, or the group's own
"grouped_<op>.noname.<n>"), so every rank pairs them the same way."""

from __future__ import annotations

from functools import partial
from typing import Any, List, Optional, Sequence, Tuple

import torch

from hvdrun._basics import require_init
from hvdrun.common.exceptions import InvalidArgumentError
from hvdrun.torch._arguments import (Average, ProcessSet, _check_process_set, _dtype_of, _set_rank_size,
                                     global_process_set)
from hvdrun.torch._handles import _combine, _op_name, synchronize
from hvdrun.torch.compression import Compression
from hvdrun.torch.mpi_ops import (_check_reducescatter, _reducescatter_grad_scale, allgather_async, grouped_allreduce,
                                  reducescatter_async)

__all__ = ["grouped_allgather", "grouped_allgather_async", "grouped_reducescatter", "grouped_reducescatter_async"]


def _part_names(kind: str, name: Optional[str], n: int, ps: int = 0) -> Tuple[str, List[str]]:
    base = _op_name(kind, name, ps)
    return base, [f"{base}.{i}" for i in range(n)]


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts gathering each tensor of the list along its first dimension; synchronize(handle)
    returns the list of gathered tensors."""
    require_init()
    ps = _check_process_set(process_set)
    if len(tensors) == 0:
        raise InvalidArgumentError("grouped_allgather: the list of tensors is empty")
    for t in tensors:  # a 0-d tensor fails on every rank, as hvd.allgather's
        _dtype_of(t, "grouped_allgather")
    base, names = _part_names("grouped_allgather", name, len(tensors), ps)
    return _combine(f"grouped allgather {base!r}",
                    [partial(allgather_async, t, nm, process_set=process_set) for t, nm in zip(tensors, names)])


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: Optional[str], process_set: ProcessSet,
                *tensors: torch.Tensor) -> Any:  # type: ignore[override]
        out = tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set=process_set)))
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return out

    @staticmethod
    def backward(ctx: Any, *grad_output: torch.Tensor) -> Any:  # type: ignore[override]
        # As Horovod: the gradients averaged across ranks, each rank taking its own rows.
        ps = ctx.process_set
        reduced = grouped_allreduce([g.contiguous() for g in grad_output], op=Average, process_set=ps)
        dims = grouped_allgather([torch.tensor([d], dtype=torch.int64) for d in ctx.dims], process_set=ps)
        me = _set_rank_size(_check_process_set(ps))[0]
        offsets = [int(d[:me].sum().item()) for d in dims]
        return (None, None, *[g.narrow(0, off, d) for g, off, d in zip(reduced, offsets, ctx.dims)])


def grouped_allgather(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Each tensor of the list concatenated with the other ranks' along the first dimension,
    by rank (differentiable)."""
    _check_process_set(process_set)
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: Optional[str] = None, op: int = Average,
                                process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Starts reduce-scattering each tensor of the list (see reducescatter_async);
    synchronize(handle) returns the list of this rank's shares."""
    require_init()
    ps = _check_process_set(process_set)
    if len(tensors) == 0:
        raise InvalidArgumentError("grouped_reducescatter: the list of tensors is empty")
    for t in tensors:
        _check_reducescatter(t, op, "grouped_reducescatter")
    base, names = _part_names("grouped_reducescatter", name, len(tensors), ps)
    return _combine(f"grouped reducescatter {base!r}",
                    [partial(reducescatter_async, t, nm, op, process_set=process_set, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor) for t, nm in zip(tensors, names)])


class HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: Optional[str], op: int, prescale_factor: float, postscale_factor: float,
                process_set: ProcessSet, *tensors: torch.Tensor) -> Any:  # type: ignore[override]
        n = _set_rank_size(_check_process_set(process_set))[1]
        ctx.scale = _reducescatter_grad_scale(op, prescale_factor, postscale_factor, n)
        ctx.process_set = process_set
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set=process_set,
                                                             prescale_factor=prescale_factor,
                                                             postscale_factor=postscale_factor)))

    @staticmethod
    def backward(ctx: Any, *grad_output: torch.Tensor) -> Any:  # type: ignore[override]
        grads = [g.contiguous() * ctx.scale if ctx.scale != 1.0 else g.contiguous() for g in grad_output]
        return (None, None, None, None, None, *grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: Optional[str] = None,
                          compression: Any = Compression.none, op: int = Average,
                          process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> List[torch.Tensor]:
    """This rank's share of each tensor's reduction across ranks (differentiable);
    `compression` reduces compressed copies and returns them decompressed."""
    _check_process_set(process_set)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    out = HorovodGroupedReducescatter.apply(name, op, prescale_factor, postscale_factor, process_set, *compressed)
    return [compression.decompress(t, c) for t, c in zip(out, ctxs)]
