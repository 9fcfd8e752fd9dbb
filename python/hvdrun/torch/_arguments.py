"""What hvdrun.torch checks in a call's arguments before anything is submitted (so that a
refused call leaves no rank waiting): the reduction ops, the dtypes libhvdrun takes, the
process set, prescale/postscale factors and root ranks."""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any, Dict, Optional, Tuple

import torch

from hvdrun import _capi
from hvdrun._basics import rank, size
from hvdrun.common.exceptions import HorovodInternalError, InvalidArgumentError
from hvdrun.common.process_sets import ProcessSet, global_process_set  # noqa: F401 (re-exported)

# Reduction ops (ints, as Horovod's).
Sum = _capi.OP_SUM
Average = _capi.OP_AVERAGE
Min = _capi.OP_MIN
Max = _capi.OP_MAX
Product = _capi.OP_PRODUCT
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max", Product: "Product"}
# Horovod's Adasum: an op of its own, which Horovod's CPU build runs only with MPI (its Gloo
# build has none) and hvdrun not at all: every collective refuses it. No HVD_OP_ is 5.
Adasum = 5

_DTYPES: Dict[torch.dtype, int] = {
    torch.int8: _capi.INT8, torch.uint8: _capi.UINT8, torch.int32: _capi.INT32, torch.int64: _capi.INT64,
    torch.float16: _capi.FLOAT16, torch.bfloat16: _capi.BFLOAT16, torch.float32: _capi.FLOAT32,
    torch.float64: _capi.FLOAT64, torch.int16: _capi.INT16, torch.bool: _capi.BOOL,
}


def _check_process_set(ps: Any) -> int:
    """The id of a registered process set (ValueError for anything else)."""
    if ps is None:
        return 0
    if not isinstance(ps, ProcessSet) or ps.process_set_id is None:
        raise InvalidArgumentError(f"process_set {ps}: expected a registered hvd.ProcessSet (hvd.init(process_sets="
                                   "...) or hvd.add_process_set)")
    return int(ps.process_set_id)


def _set_rank_size(ps_id: int) -> Tuple[int, int]:
    """This rank's place in a set and the set's size (the job's for set 0)."""
    if ps_id == 0:
        return rank(), size()
    r, ranks = _capi.process_set_info(ps_id)
    return r, len(ranks)


def handle_average_backwards_compatibility(op: Optional[int], average: Optional[bool]) -> int:
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    elif average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning)
        op = Average if average else Sum
    else:
        op = Average
    if op == Adasum:
        raise InvalidArgumentError("op hvd.Adasum: hvdrun has no Adasum (Horovod runs it on CPUs only with MPI)")
    if op not in _OP_NAMES:
        raise InvalidArgumentError(f"op {op!r}: expected hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product")
    return int(op)


def _dtype_of(t: Any, what: str) -> int:
    """The C dtype of `t`, after the checks every tensor passed to libhvdrun must pass."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgumentError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    d = _DTYPES.get(t.dtype)
    if d is None:
        raise InvalidArgumentError(f"{what}: dtype {t.dtype} is not supported; expected one of "
                                   + ", ".join(str(k).replace("torch.", "") for k in _DTYPES))
    if t.layout != torch.strided:
        raise InvalidArgumentError(f"{what}: a {t.layout} tensor is not supported; expected a dense tensor")
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{what}: the tensor is not contiguous (shape {tuple(t.shape)}, "
                                   f"strides {t.stride()}); pass tensor.contiguous()")
    if t.device.type == "cuda":
        if not _capi.cuda_built():
            raise InvalidArgumentError(f"{what}: the tensor is on {t.device}, but this libhvdrun "
                                       f"({_capi.library_path}) was built without CUDA; move it to the CPU or "
                                       "install an hvdrun built with CUDA and NCCL")
    elif t.device.type != "cpu":
        raise InvalidArgumentError(f"{what}: tensors on {t.device.type} are not supported; expected cpu or cuda")
    return d


def _buffer_dtype(send: torch.Tensor, recv: torch.Tensor) -> int:
    """The C dtype of the buffers handed to libhvdrun, from those very buffers: a buffer
    whose dtype differs from the code passed would be read or written past its end."""
    if send.dtype != recv.dtype:
        raise HorovodInternalError(f"hvdrun.torch: send buffer {send.dtype} and receive buffer {recv.dtype} differ")
    return _DTYPES[send.dtype]


def _factor(what: str, which: str, value: Any) -> float:
    """A prescale/postscale factor as a finite float (checked before anything is submitted):
    a number, as Horovod's C++ double takes it, not a string."""
    try:
        f = math.nan if isinstance(value, (str, bytes)) else float(value)
    except (TypeError, ValueError, RuntimeError):
        f = math.nan
    if not math.isfinite(f):
        raise InvalidArgumentError(f"{what}: {which} {value!r}: expected a finite number")
    return f


def _root(what: str, root_rank: Any) -> int:
    try:
        root = operator.index(root_rank)
    except TypeError:
        root = -1
    if not 0 <= root < size():
        raise InvalidArgumentError(f"{what}: root_rank {root_rank!r} is not a rank of this job (0..{size() - 1})")
    return root
