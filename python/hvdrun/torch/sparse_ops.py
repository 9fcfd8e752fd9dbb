"""Horovod's sparse_allreduce_async (horovod/torch/mpi_ops.py): a sparse tensor reduced as
every rank's indices and values gathered (their counts may differ between ranks), the values
summed where indices repeat (divided by size() for Average)."""

from __future__ import annotations

from typing import Callable

import torch

from hvdrun.common.exceptions import InvalidArgumentError
from hvdrun.torch._arguments import Average, ProcessSet, _check_process_set, _set_rank_size, global_process_set
from hvdrun.torch._handles import synchronize
from hvdrun.torch.mpi_ops import allgather_async

__all__ = ["sparse_allreduce_async"]


def sparse_allreduce_async(tensor: torch.Tensor, name: str, op: int,
                           process_set: ProcessSet = global_process_set) -> Callable[[], torch.Tensor]:
    """Starts reducing the sparse `tensor` across ranks (a sum; divided by size() for
    hvd.Average, as Horovod does for any other op: no division). Returns,
    as Horovod does, a callable rather than a handle: calling it waits and returns the
    reduced sparse tensor (uncoalesced: repeated indices add up)."""
    ps = _check_process_set(process_set)
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise InvalidArgumentError("sparse_allreduce_async: expected a sparse torch.Tensor")
    t = tensor.coalesce()
    # Gathered along the first dimension: the indices as (nnz, ndim) rows.
    indices_handle = allgather_async(t.indices().t().contiguous(), name=f"{name}.indices",
                                     process_set=process_set)
    values_handle = allgather_async(t.values().contiguous(), name=f"{name}.values",
                                    process_set=process_set)

    def handle() -> torch.Tensor:
        indices = synchronize(indices_handle)
        values = synchronize(values_handle)
        if op == Average:
            values = values / _set_rank_size(ps)[1]
        return torch.sparse_coo_tensor(indices.t(), values, t.size())

    return handle
