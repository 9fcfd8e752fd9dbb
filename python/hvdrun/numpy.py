"""hvdrun.numpy: the job's topology and blocking collectives on NumPy arrays.

Ranks call the collectives in the same order (they are unnamed, like libhvdrun's blocking
C calls). Arrays must be C-contiguous and of a dtype libhvdrun reduces: int8, uint8,
int32, int64, float16, float32, float64.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from hvdrun import _capi
from hvdrun._basics import (cross_rank, cross_size, init, is_initialized, local_rank, local_size, nccl_built,
                            rank, require_init, shutdown, size)
from hvdrun.common.exceptions import HorovodInternalError, InvalidArgumentError, NotInitializedError

__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank",
           "cross_size", "nccl_built", "Average", "Sum", "Min", "Max", "Product", "allreduce", "allreduce_",
           "broadcast", "broadcast_", "allgather", "barrier", "HorovodInternalError", "InvalidArgumentError",
           "NotInitializedError"]

Sum = _capi.OP_SUM
Average = _capi.OP_AVERAGE
Min = _capi.OP_MIN
Max = _capi.OP_MAX
Product = _capi.OP_PRODUCT
_OPS = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product"}

_DTYPES = {np.dtype(np.int8): _capi.INT8, np.dtype(np.uint8): _capi.UINT8, np.dtype(np.int32): _capi.INT32,
           np.dtype(np.int64): _capi.INT64, np.dtype(np.float16): _capi.FLOAT16,
           np.dtype(np.float32): _capi.FLOAT32, np.dtype(np.float64): _capi.FLOAT64,
           np.dtype(np.int16): _capi.INT16, np.dtype(np.bool_): _capi.BOOL}


def _dtype(a: np.ndarray, what: str) -> int:
    if not isinstance(a, np.ndarray):
        raise InvalidArgumentError(f"{what}: expected a numpy.ndarray, got {type(a).__name__}")
    d = _DTYPES.get(a.dtype)
    if d is None:
        raise InvalidArgumentError(f"{what}: dtype {a.dtype} is not supported; expected one of "
                                   + ", ".join(str(k) for k in _DTYPES))
    if not a.flags.c_contiguous:
        raise InvalidArgumentError(f"{what}: the array is not C-contiguous; pass np.ascontiguousarray(a)")
    return d


def _op(op: Any) -> int:
    if op not in _OPS:
        raise InvalidArgumentError(f"op {op!r}: expected hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product")
    return int(op)


def _ptr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def allreduce_(array: np.ndarray, op: int = Average) -> np.ndarray:
    """Reduces `array` across ranks in place and returns it."""
    require_init()
    d = _dtype(array, "allreduce_")
    if not array.flags.writeable:
        raise InvalidArgumentError("allreduce_: the array is read-only")
    _capi.allreduce(_ptr(array), _ptr(array), array.size, d, _op(op))
    return array


def allreduce(array: np.ndarray, op: int = Average) -> np.ndarray:
    """The reduction of `array` across ranks, as a new array."""
    require_init()
    d = _dtype(array, "allreduce")
    out = np.empty_like(array, order="C")
    _capi.allreduce(_ptr(array), _ptr(out), array.size, d, _op(op))
    return out


def broadcast_(array: np.ndarray, root_rank: int) -> np.ndarray:
    """Overwrites `array` with root_rank's, in place, and returns it."""
    require_init()
    d = _dtype(array, "broadcast_")
    if not array.flags.writeable:
        raise InvalidArgumentError("broadcast_: the array is read-only")
    _capi.broadcast(_ptr(array), array.size, d, int(root_rank))
    return array


def broadcast(array: np.ndarray, root_rank: int) -> np.ndarray:
    """root_rank's `array`, as a new array."""
    return broadcast_(np.array(array, order="C", copy=True), root_rank)


def allgather(array: np.ndarray) -> np.ndarray:
    """Every rank's `array` concatenated along the first dimension, by rank. The arrays
    must have the same shape on every rank."""
    require_init()
    d = _dtype(array, "allgather")
    if array.ndim == 0:
        raise InvalidArgumentError("allgather: the array needs at least one dimension")
    out = np.empty((size() * array.shape[0],) + array.shape[1:], dtype=array.dtype)
    _capi.allgather(_ptr(array), _ptr(out), array.size, d)
    return out


def barrier() -> None:
    require_init()
    _capi.barrier()


def join() -> int:
    """This rank has no more data: it contributes to the other ranks' collectives until all
    have joined. Returns the rank that joined last."""
    require_init()
    return _capi.join()

