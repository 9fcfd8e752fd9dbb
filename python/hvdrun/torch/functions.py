"""Helpers on top of the collectives (horovod/torch/functions.py): parameters, optimizer
state and Python objects from one rank to all."""

from __future__ import annotations

import io
import pickle
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from hvdrun.common.exceptions import InvalidArgumentError
from hvdrun.torch.mpi_ops import (ProcessSet, _check_process_set, _dtype_of, _root, allgather, broadcast_,
                                  broadcast_async_, global_process_set, rank, synchronize)

try:  # cloudpickle (as Horovod) when present: it also takes lambdas and local classes
    import cloudpickle as _pickler  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle  # type: ignore[assignment]


def broadcast_parameters(params: Union[Dict[str, torch.Tensor], List[Any]], root_rank: int,
                         process_set: ProcessSet = global_process_set) -> None:
    """Overwrites, in place, every tensor of `params` (a model's state_dict(), or a list of
    parameters or of (name, parameter) pairs such as list(model.named_parameters())) with
    root_rank's. The broadcasts run concurrently."""
    _check_process_set(process_set)
    if isinstance(params, dict):
        items: List[Tuple[Optional[str], Any]] = sorted(params.items())
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    # Every entry is checked before the first broadcast is submitted: a bad one late in the
    # list must not leave the earlier ones running on every rank.
    tensors: List[Tuple[Optional[str], torch.Tensor]] = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"broadcast_parameters: {name or 'an entry'} is a {type(p).__name__}, not a tensor")
        t = p.data if isinstance(p, torch.nn.Parameter) else p
        _dtype_of(t, f"broadcast_parameters: {name or 'an entry'}")
        tensors.append((name, t))
    named = [name for name, _ in tensors if name is not None]
    twice = sorted({name for name in named if named.count(name) > 1})
    if twice:
        raise InvalidArgumentError(f"broadcast_parameters: the names {twice} appear more than once; expected "
                                   "one tensor per name")
    if tensors:
        _root("broadcast_parameters", root_rank)
    handles = [broadcast_async_(t, root_rank, name, process_set) for name, t in tensors]
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              process_set: ProcessSet = global_process_set) -> None:
    """Makes the optimizer's state (its per-parameter tensors and scalars, and every param
    group's options such as lr) root_rank's on every rank. A new optimizer without state is
    given one first, by a step with zero gradients (as Horovod does)."""
    _check_process_set(process_set)
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = p.data.new(p.size()).zero_()
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
        # The wrapped optimizer's own step: a DistributedOptimizer's would allreduce.
        if getattr(optimizer, "_hvdrun_distributed", False):
            super(optimizer.__class__, optimizer).step()  # type: ignore[misc]
        else:
            optimizer.step()
        state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        return

    # Options of each param group (lr, momentum, ...), as the root has them.
    options = [{k: v for k, v in g.items() if k != "params"} for g in state_dict["param_groups"]]
    options = broadcast_object(options, root_rank, process_set=process_set)
    for g, opts in zip(state_dict["param_groups"], options):
        g.update(opts)

    # Per-parameter state: tensors broadcast in place, everything else in one object.
    tensors: List[Tuple[str, torch.Tensor]] = []
    scalars: Dict[Tuple[Any, str], Any] = {}
    for pid in sorted(state_dict["state"].keys(), key=str):
        st = state_dict["state"][pid]
        for key in sorted(st.keys(), key=str):
            v = st[key]
            if isinstance(v, torch.Tensor):
                if not v.is_contiguous():
                    v = st[key] = v.contiguous()
                tensors.append((f"optimizer_state.{pid}.{key}", v))
            else:
                scalars[(pid, key)] = v
    broadcast_parameters(tensors, root_rank, process_set)
    for (pid, key), v in broadcast_object(scalars, root_rank, process_set=process_set).items():
        state_dict["state"][pid][key] = v
    optimizer.load_state_dict(state_dict)


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """root_rank's `obj` (any picklable object) on every rank. Named, as Horovod names it,
    after the object's type by default ("<type>.sz", "<type>.t"): every rank passes an object
    of the same type (as Horovod asks: `{}` on the others, not None), or the same `name`."""
    _check_process_set(process_set)
    name = type(obj).__name__ if name is None else name
    if rank() == root_rank:
        b = io.BytesIO()
        _pickler.dump(obj, b)
        t = torch.frombuffer(bytearray(b.getvalue()), dtype=torch.uint8) if b.tell() else torch.empty(0, dtype=torch.uint8)
        sz = torch.tensor([t.numel()], dtype=torch.int64)
        broadcast_(sz, root_rank, name + ".sz", process_set)
    else:
        sz = torch.tensor([0], dtype=torch.int64)
        broadcast_(sz, root_rank, name + ".sz", process_set)
        t = torch.empty(int(sz.item()), dtype=torch.uint8)
    broadcast_(t, root_rank, name + ".t", process_set)
    if rank() != root_rank:
        obj = _pickler.loads(t.numpy().tobytes())
    return obj


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> List[Any]:
    """Every rank's `obj` (any picklable object), as a list by rank. Named, as Horovod names
    it, after the object's type by default: the ranks pair it by that name even when their
    unnamed operations went out of step (an allgather refused on some ranks only, as while
    another rank has joined)."""
    _check_process_set(process_set)
    name = type(obj).__name__ if name is None else name
    data = _pickler.dumps(obj)
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    sizes = allgather(torch.tensor([t.numel()], dtype=torch.int64), name=name + ".sz", process_set=process_set)
    gathered = allgather(t, name=name + ".t", process_set=process_set).numpy().tobytes()
    out, start = [], 0
    for i in range(len(sizes)):
        n = int(sizes[i])
        out.append(_pickler.loads(gathered[start:start + n]))
        start += n
    return out

