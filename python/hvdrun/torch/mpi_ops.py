"""Horovod's collective operations on torch tensors (horovod/torch/mpi_ops.py), on libhvdrun.

Tensors go to libhvdrun by data pointer, without copies: an in-place call reduces the
tensor's own memory, an out-of-place call writes straight into the new output tensor. CPU
tensors go to the TCP ring, CUDA tensors to NCCL, both through libhvdrun's engine.

Every operation is named (Horovod's "<op>.<name>", or "<op>.noname.<n>" when no name is
given: unnamed operations must then be submitted in the same order on every rank). The
*_async calls return an int handle; poll(handle) says whether it finished and
synchronize(handle) waits and returns the output.

prescale_factor, postscale_factor and Average act as Horovod's: the result keeps the
tensor's dtype; an integer tensor is scaled element by element in float64 and truncated
toward zero (Horovod's ScaleBuffer), and averaged as its sum times postscale / size().
Every argument is checked before anything is submitted, so a refused call leaves no rank
waiting.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from hvdrun import _basics  # noqa: F401 (Horovod's hvd.mpi_ops._basics)
from hvdrun import _capi
from hvdrun._basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
                            is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, rank, require_init, rocm_built, shutdown, size)
from hvdrun.common.exceptions import HorovodInternalError, InvalidArgumentError, NotInitializedError
from hvdrun.common.process_sets import add_process_set, remove_process_set
from hvdrun.torch._arguments import (Adasum, Average, Max, Min, Product, ProcessSet, Sum, _buffer_dtype,
                                     _check_process_set, _dtype_of, _factor, _root, _set_rank_size, global_process_set,
                                     handle_average_backwards_compatibility)
from hvdrun.torch._handles import _Pending, _op_name, _register, _wait_all, poll, synchronize
from hvdrun.torch._scaling import _group_scalings, _scale, _scaling
from hvdrun.torch.compression import Compression

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
    "is_homogeneous", "nccl_built", "cuda_built", "mpi_built", "gloo_built", "mpi_threads_supported",
    "mpi_enabled", "gloo_enabled", "ccl_built", "ddl_built", "rocm_built",
    "Adasum", "Average", "Sum", "Min", "Max", "Product", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "allgather", "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "poll", "synchronize", "join", "barrier", "HorovodInternalError",
]


# --- allreduce ---------------------------------------------------------------------------------
def _allreduce_async(tensor: torch.Tensor, output: torch.Tensor, name: Optional[str], op: int,
                     prescale_factor: float, postscale_factor: float, ps: int = 0) -> int:
    require_init()
    _dtype_of(tensor, "allreduce")
    sc = _scaling(tensor, op, _factor("allreduce", "prescale_factor", prescale_factor),
                  _factor("allreduce", "postscale_factor", postscale_factor), native=True,
                  n=_set_rank_size(ps)[1] if ps else None)
    full = _op_name("allreduce", name, ps)
    _capi.next_call(ps, [tensor.shape])
    c = _capi.allreduce_async(full, sc.send.data_ptr(), output.data_ptr(), tensor.numel(),
                              _buffer_dtype(sc.send, output), sc.op, sc.prescale, sc.postscale)

    def finish(p: _Pending) -> torch.Tensor:
        _wait_all(p)
        if sc.after != 1.0:
            _scale(output, sc.after, out=output)
        return output

    return _register(_Pending(f"allreduce {full!r}", [c], (tensor, sc.send, output), finish))


def allreduce_async(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
                    op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing `tensor` across ranks into a new tensor; synchronize(handle) returns it."""
    op = handle_average_backwards_compatibility(op, average)
    ps = _check_process_set(process_set)
    _dtype_of(tensor, "allreduce_async")
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, ps)


def allreduce_async_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
                     op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing `tensor` across ranks in place; synchronize(handle) returns it."""
    op = handle_average_backwards_compatibility(op, average)
    ps = _check_process_set(process_set)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, ps)


class HorovodAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: Optional[str], op: int, prescale_factor: float,
                postscale_factor: float, process_set: ProcessSet) -> torch.Tensor:  # type: ignore[override]
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        return synchronize(allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Any:  # type: ignore[override]
        return allreduce(grad_output.contiguous(), op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor,
                         process_set=ctx.process_set), None, None, None, None, None


def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression: Any = Compression.none, op: Optional[int] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """The reduction of `tensor` across ranks (op: Average by default), as a new tensor.
    Differentiable: the gradient is reduced the same way. `compression` (Compression.fp16)
    reduces a compressed copy and returns it decompressed."""
    op = handle_average_backwards_compatibility(op, average)
    _check_process_set(process_set)
    compressed, cctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, cctx)


def allreduce_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
               op: Optional[int] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces `tensor` across ranks in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


# --- grouped allreduce -------------------------------------------------------------------------
def _grouped_allreduce_async(tensors: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
                             name: Optional[str], op: int, prescale_factor: float,
                             postscale_factor: float, ps: int = 0) -> int:
    require_init()
    if len(tensors) == 0:
        raise InvalidArgumentError("grouped_allreduce: the list of tensors is empty")
    for t in tensors:
        _dtype_of(t, "grouped_allreduce")
    pre = _factor("grouped_allreduce", "prescale_factor", prescale_factor)
    post = _factor("grouped_allreduce", "postscale_factor", postscale_factor)
    # Everything is checked and prepared (prescaled integer copies included) before the
    # first part is submitted.
    scs = _group_scalings(tensors, op, pre, post, n=_set_rank_size(ps)[1] if ps else None)
    full = _op_name("grouped_allreduce", name, ps)
    # One operation with each tensor's dtype, whatever the mix: the ranks' lists are compared
    # tensor by tensor (a rank whose dtypes differ fails the group everywhere at once; a
    # split by dtype named the parts after the local dtypes, so such a rank hung). libhvdrun
    # groups tensors on one kind of memory: a list on several devices is one group per
    # device, named after it.
    parts: Dict[str, List[int]] = {}
    for i, t in enumerate(tensors):
        parts.setdefault(str(t.device), []).append(i)
    c_handles: List[int] = []
    try:
        for dev, idx in sorted(parts.items()):
            part_name = full if len(parts) == 1 else f"{full}.{dev}"
            sc = scs[idx[0]]  # one op and one pair of factors for the whole group (_group_scalings)
            _capi.next_call(ps, [tensors[i].shape for i in idx])
            c_handles.append(_capi.grouped_allreduce_dtypes_async(
                part_name, [scs[i].send.data_ptr() for i in idx], [outputs[i].data_ptr() for i in idx],
                [tensors[i].numel() for i in idx], [_buffer_dtype(scs[i].send, outputs[i]) for i in idx], sc.op,
                sc.prescale, sc.postscale))
    except HorovodInternalError:
        for c in c_handles:
            try:
                _capi.wait(c, full)
            except HorovodInternalError:
                pass
        raise
    outs = list(outputs)

    def finish(p: _Pending) -> List[torch.Tensor]:
        _wait_all(p)
        for out, sc in zip(outs, scs):
            if sc.after != 1.0:
                _scale(out, sc.after, out=out)
        return outs

    keep = (tuple(tensors), tuple(sc.send for sc in scs), tuple(outputs))
    return _register(_Pending(f"grouped allreduce {full!r}", c_handles, keep, finish))


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                            name: Optional[str] = None, op: Optional[int] = None, prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing a list of tensors as one operation; synchronize returns new tensors."""
    op = handle_average_backwards_compatibility(op, average)
    ps = _check_process_set(process_set)
    for t in tensors:
        _dtype_of(t, "grouped_allreduce_async")
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, ps)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                             name: Optional[str] = None, op: Optional[int] = None, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing a list of tensors in place as one operation."""
    op = handle_average_backwards_compatibility(op, average)
    ps = _check_process_set(process_set)
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, ps)


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: Optional[str], op: int, prescale_factor: float, postscale_factor: float,
                process_set: ProcessSet, *tensors: torch.Tensor) -> Any:  # type: ignore[override]
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allreduce_async(list(tensors), name=name, op=op,
                                                         prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor, process_set=process_set)))

    @staticmethod
    def backward(ctx: Any, *grad_output: torch.Tensor) -> Any:  # type: ignore[override]
        grads = grouped_allreduce([g.contiguous() for g in grad_output], op=ctx.op,
                                  prescale_factor=ctx.prescale_factor, postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None, *grads)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: Optional[bool] = None, name: Optional[str] = None,
                      compression: Any = Compression.none, op: Optional[int] = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """The reductions of a list of tensors, negotiated and completed as one operation."""
    op = handle_average_backwards_compatibility(op, average)
    _check_process_set(process_set)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: Optional[bool] = None,
                       name: Optional[str] = None, op: Optional[int] = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> List[torch.Tensor]:
    """Reduces a list of tensors in place, as one operation, and returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# --- allgather ---------------------------------------------------------------------------------
def _rows(tensor: torch.Tensor) -> Tuple[int, int]:
    rows = tensor.shape[0]
    return rows, (tensor.numel() // rows if rows else _prod(tensor.shape[1:]))


def _prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _finish_with_rows(p: _Pending, make_output: Callable[[List[int]], torch.Tensor], n: int) -> Any:
    """For outputs the other ranks size: reads the rows from each of the n ranks, allocates,
    copies out."""
    c = p.c_handles[0]
    try:
        rows = _capi.result_rows(c, n, p.what)
    except HorovodInternalError:
        try:
            _capi.wait(c, p.what)  # releases the handle
        except HorovodInternalError:
            pass
        raise
    out = make_output(rows)
    _capi.wait_result(c, out.data_ptr(), p.what)
    return out, rows


def allgather_async(tensor: torch.Tensor, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts gathering every rank's `tensor` along the first dimension (which may differ
    between ranks; the other dimensions may not)."""
    require_init()
    ps = _check_process_set(process_set)
    d = _dtype_of(tensor, "allgather")
    full = _op_name("allgather", name, ps)
    # A 0-d tensor goes out as one row of one element, its shape [] with it: the negotiation
    # refuses it on every rank, as Horovod's controller does (a refusal here, on this rank
    # only, left the others waiting).
    rows, row_elems = _rows(tensor) if tensor.dim() else (1, 1)
    n = _set_rank_size(ps)[1]
    _capi.next_call(ps, [tensor.shape])
    c = _capi.allgatherv_async(full, tensor.data_ptr(), rows, row_elems, d)
    tail = tuple(tensor.shape[1:])

    def finish(p: _Pending) -> torch.Tensor:
        out, _ = _finish_with_rows(p, lambda r: tensor.new_empty((sum(r),) + tail), n)
        return out

    return _register(_Pending(f"allgather {full!r}", [c], (tensor,), finish))


class HorovodAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: Optional[str],
                process_set: ProcessSet) -> torch.Tensor:  # type: ignore[override]
        out = synchronize(allgather_async(tensor, name, process_set))
        ctx.dim, ctx.process_set = tensor.shape[0], process_set
        return out

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Any:  # type: ignore[override]
        ps = ctx.process_set
        grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=ps)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ps)
        offset = int(dims[:_set_rank_size(_check_process_set(ps))[0]].sum().item())
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor: torch.Tensor, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Every rank's `tensor` concatenated along the first dimension, by rank."""
    _check_process_set(process_set)
    return HorovodAllgather.apply(tensor, name, process_set)


# --- broadcast ---------------------------------------------------------------------------------
def _broadcast_async(tensor: torch.Tensor, output: torch.Tensor, root_rank: int, name: Optional[str],
                     ps: int = 0) -> int:
    require_init()
    _dtype_of(tensor, "broadcast")
    root = _root("broadcast", root_rank)
    full = _op_name("broadcast", name, ps)
    if output is not tensor:
        output.copy_(tensor)
    _capi.next_call(ps, [output.shape])
    c = _capi.broadcast_async(full, output.data_ptr(), output.numel(), _buffer_dtype(tensor, output), root)

    def finish(p: _Pending) -> torch.Tensor:
        _wait_all(p)
        return output

    return _register(_Pending(f"broadcast {full!r}", [c], (tensor, output), finish))


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts broadcasting root_rank's `tensor` into a new tensor."""
    ps = _check_process_set(process_set)
    _dtype_of(tensor, "broadcast_async")
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _broadcast_async(tensor, output, root_rank, name, ps)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts broadcasting root_rank's `tensor` into `tensor` on every rank, in place."""
    return _broadcast_async(tensor, tensor, root_rank, name, _check_process_set(process_set))


class HorovodBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: Optional[str],
                process_set: ProcessSet) -> torch.Tensor:  # type: ignore[override]
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Any:  # type: ignore[override]
        grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """root_rank's `tensor`, as a new tensor on every rank."""
    _check_process_set(process_set)
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Overwrites `tensor` with root_rank's, in place, and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall ----------------------------------------------------------------------------------
def alltoall_async(tensor: torch.Tensor, splits: Optional[Union[torch.Tensor, Sequence[int]]] = None,
                   name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> int:
    """Starts an alltoall: the first dimension of `tensor` is cut into size() blocks (of
    `splits[r]` rows, or equal blocks when splits is None) and block r goes to rank r.
    synchronize(handle) returns (output, received_splits)."""
    require_init()
    ps = _check_process_set(process_set)
    d = _dtype_of(tensor, "alltoall")
    n = _set_rank_size(ps)[1]
    split_list: Optional[List[int]] = None
    if tensor.dim() == 0:  # as allgather's: one row (to rank 0), refused on every rank by the negotiation
        rows, row_elems, split_list = 1, 1, [1] + [0] * (n - 1)
    else:
        rows, row_elems = _rows(tensor)
    if splits is not None and tensor.dim():
        split_list = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
        if len(split_list) != n or any(s < 0 for s in split_list) or sum(split_list) != rows:
            raise InvalidArgumentError(f"alltoall: splits {split_list} must be {n} non-negative row counts "
                                       f"adding up to the tensor's first dimension ({rows})")
    elif split_list is None and rows % n:
        raise InvalidArgumentError(f"alltoall: without splits the first dimension ({rows}) must be a multiple "
                                   f"of size() ({n})")
    full = _op_name("alltoall", name, ps)
    _capi.next_call(ps, [tensor.shape])
    c = _capi.alltoall_async(full, tensor.data_ptr(), rows, row_elems, split_list, d)
    tail = tuple(tensor.shape[1:])

    def finish(p: _Pending) -> Tuple[torch.Tensor, torch.Tensor]:
        out, recv_rows = _finish_with_rows(p, lambda r: tensor.new_empty((sum(r),) + tail), n)
        return out, torch.tensor(recv_rows, dtype=torch.int32)

    return _register(_Pending(f"alltoall {full!r}", [c], (tensor,), finish))


class HorovodAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: Optional[str],
                process_set: ProcessSet) -> Any:  # type: ignore[override]
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.recvsplits = received_splits
        ctx.has_splits = splits is not None
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor, *rest: Any) -> Any:  # type: ignore[override]
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.recvsplits, process_set=ctx.process_set))
        return grad, None, None, None


def alltoall(tensor: torch.Tensor, splits: Optional[Union[torch.Tensor, Sequence[int]]] = None,
             name: Optional[str] = None, process_set: ProcessSet = global_process_set) -> Any:
    """Scatters blocks of `tensor`'s first dimension to the ranks and gathers the blocks
    they send here, by rank. Returns the output, and with `splits` given also the rows
    received from each rank (received_splits, int32)."""
    _check_process_set(process_set)
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


# --- reducescatter -----------------------------------------------------------------------------
def reducescatter_async(tensor: torch.Tensor, name: Optional[str] = None, op: int = Average,
                        process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0) -> int:
    """Starts a reducescatter: `tensor` is reduced across ranks and its first dimension
    split among them, rank r getting rows/size() rows, one more when r < rows % size()."""
    require_init()
    ps = _check_process_set(process_set)
    _check_reducescatter(tensor, op, "reducescatter")
    r, n = _set_rank_size(ps)
    sc = _scaling(tensor, op, _factor("reducescatter", "prescale_factor", prescale_factor),
                  _factor("reducescatter", "postscale_factor", postscale_factor), native=False, n=n)
    rows, row_elems = _rows(tensor)
    mine = rows // n + (1 if r < rows % n else 0)
    output = tensor.new_empty((mine,) + tuple(tensor.shape[1:]))
    full = _op_name("reducescatter", name, ps)
    _capi.next_call(ps, [tensor.shape])
    c = _capi.reducescatter_async(full, sc.send.data_ptr(), output.data_ptr(), rows, row_elems,
                                  _buffer_dtype(sc.send, output), int(sc.op))

    def finish(p: _Pending) -> torch.Tensor:
        _wait_all(p)
        if sc.after != 1.0:
            _scale(output, sc.after, out=output)
        return output

    return _register(_Pending(f"reducescatter {full!r}", [c], (tensor, sc.send, output), finish))


def _check_reducescatter(tensor: torch.Tensor, op: int, what: str) -> None:
    _dtype_of(tensor, what)
    if op not in (Sum, Average):  # as Horovod: "Reducescatter currently only supports AVERAGE and SUM"
        raise InvalidArgumentError(f"{what}: op {op!r}: expected hvd.Average or hvd.Sum")
    if tensor.dim() == 0:
        raise InvalidArgumentError(f"{what}: a scalar cannot be scattered: the tensor needs at least one dimension")


def _reducescatter_grad_scale(op: int, prescale_factor: float, postscale_factor: float,
                              n: Optional[int] = None) -> float:
    """Horovod's factor on a reducescatter's gradient before it is gathered: the size of its
    process set (`n`, else size()) for Sum (1 for Average), times the prescale and postscale
    factors."""
    return ((n or size()) if op == Sum else 1) * float(prescale_factor) * float(postscale_factor)


class HorovodReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: Optional[str], op: int, prescale_factor: float,
                postscale_factor: float, process_set: ProcessSet) -> torch.Tensor:  # type: ignore[override]
        out = synchronize(reducescatter_async(tensor, name, op, process_set=process_set,
                                              prescale_factor=prescale_factor, postscale_factor=postscale_factor))
        n = _set_rank_size(_check_process_set(process_set))[1]
        ctx.scale = _reducescatter_grad_scale(op, prescale_factor, postscale_factor, n)
        ctx.process_set = process_set
        return out

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> Any:  # type: ignore[override]
        grad = grad_output.contiguous()
        return (allgather(grad * ctx.scale if ctx.scale != 1.0 else grad, process_set=ctx.process_set),
                None, None, None, None, None)


def reducescatter(tensor: torch.Tensor, name: Optional[str] = None, compression: Any = Compression.none,
                  op: int = Average, process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """This rank's share of the reduction of `tensor` across ranks (see reducescatter_async);
    `compression` reduces a compressed copy and returns it decompressed. Horovod's argument
    order: reducescatter(tensor, name, compression, op, ...)."""
    _check_process_set(process_set)
    compressed, cctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, cctx)


# --- join, barrier -----------------------------------------------------------------------------
def join(device: int = -1) -> int:
    """This rank has run out of data: until every rank has joined it takes part in the
    others' allreduces with zeros (an Average still divides by size()). Returns the rank
    that joined last. `device` is accepted for Horovod's signature; libhvdrun needs none."""
    require_init()
    return _capi.join()


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns when every rank (of the process set) has called barrier()."""
    require_init()
    _capi.next_call(_check_process_set(process_set), [])
    _capi.barrier()

