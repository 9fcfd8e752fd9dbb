"""DistributedOptimizer (horovod/torch/optimizer.py): wraps a torch optimizer so each
gradient is averaged across ranks as soon as backward produces it.

A hook on every parameter's gradient accumulator submits that gradient's allreduce (in
place, named after the parameter) the moment backward has it, so communication overlaps
the rest of backward; step() (or synchronize()) waits for them all and then applies the
wrapped optimizer's update."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from hvdrun import _env
from hvdrun.torch.compression import Compression
from hvdrun.torch.functions import broadcast_object
from hvdrun.torch.mpi_ops import (Average, ProcessSet, _check_process_set, allreduce_async_, global_process_set,
                                  grouped_allreduce_async_, size, synchronize)
from hvdrun.torch.sparse_ops import sparse_allreduce_async


def _split_list(items: List[Any], n: int) -> List[List[Any]]:
    """n chunks of near-equal length, in order (Horovod's split_list)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


class _DistributedOptimizer(torch.optim.Optimizer):
    _hvdrun_distributed = True

    def __init__(self, params: Any, named_parameters: Optional[Sequence[Tuple[str, torch.Tensor]]],
                 compression: Any, backward_passes_per_step: int = 1, op: int = Average,
                 gradient_predivide_factor: float = 1.0, groups: Optional[Union[int, List[List[torch.Tensor]]]] = None,
                 sparse_as_dense: bool = False, process_set: ProcessSet = global_process_set) -> None:
        super(self.__class__, self).__init__(params)  # type: ignore[misc]
        self._compression = compression
        self.process_set = process_set

        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [(f"allreduce.noname.{i}.{j}", v)
                                for i, param_group in enumerate(self.param_groups)
                                for j, v in enumerate(param_group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters().")
        dups = _find_duplicates([k for k, _ in named_parameters])
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                             % ", ".join(sorted(dups)))
        all_param_ids = {id(v) for param_group in self.param_groups for v in param_group["params"]}
        named_param_ids = {id(v) for _, v in named_parameters}
        unnamed = all_param_ids - named_param_ids
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters were not named. "
                             "Python object ids: %s" % ", ".join(str(i) for i in sorted(unnamed)))

        self._parameter_names: Dict[torch.Tensor, str] = {v: k for k, v in sorted(named_parameters,
                                                                                 key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay: Dict[torch.Tensor, int] = {v: backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense

        self._handles: Dict[Any, Tuple[Optional[int], Any]] = {}
        self._grad_accs: List[Any] = []
        self._requires_update: set = set()
        self._synchronized = False
        self._should_synchronize = True
        self._groups = groups
        self._p_to_group: Dict[torch.Tensor, Tuple[torch.Tensor, ...]] = {}
        self._group_counts: Dict[Tuple[torch.Tensor, ...], int] = {}
        if process_set.included() and (size() > 1 or _env.horovod_elastic()):
            self._register_hooks()

    def load_state_dict(self, *args: Any, **kwargs: Any) -> None:
        # As Horovod's, and the groups' hook counts with the pending gradients they counted
        # (Horovod 0.28.1 keeps them: a group part-counted before the load then goes out
        # early in the next backward, and its other gradients alone later, out of step with
        # the ranks that did not load).
        self._handles = {}
        for group in self._group_counts:
            self._group_counts[group] = 0
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)  # type: ignore[misc]

    def set_backward_passes_per_step(self, passes: int) -> None:
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self) -> None:
        if self._groups is not None:
            p_list = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
            # Every rank forms the same groups in the same order: rank 0's.
            names = broadcast_object([self._parameter_names.get(p) for p in p_list],
                                     root_rank=self.process_set.ranks[0] if self.process_set.ranks else 0,
                                     process_set=self.process_set)
            order = {n: i for i, n in enumerate(names)}
            p_list = sorted(p_list, key=lambda p: order[self._parameter_names.get(p)])
            if isinstance(self._groups, list):
                p_groups: List[Tuple[torch.Tensor, ...]] = []
                grouped = set()
                for group in self._groups:
                    members = tuple(p for p in p_list if any(p is q for q in group))
                    if members:
                        p_groups.append(members)
                        grouped.update(id(p) for p in members)
                p_groups += [(p,) for p in p_list if id(p) not in grouped]
            else:
                p_groups = [tuple(g) for g in _split_list(p_list, self._groups) if g]
            for group in p_groups:
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

        for param_group in self.param_groups:
            for p in param_group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    p_tmp = p.expand_as(p)
                    grad_acc = p_tmp.grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _allreduce_grad_async(self, p: torch.Tensor) -> Tuple[Optional[int], Any]:
        if p.grad is None:
            # Not computed here (an unused parameter), but another rank may have: take part with zeros.
            p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return self._sparse_allreduce_grad_async(p, name)
            tensor = tensor.to_dense()  # reduced dense, made sparse again in synchronize()
        compressed, ctx = self._compression.compress(tensor)
        if self.op == Average:
            # The average split around the sum: 1/f before, f/size() after.
            prescale, postscale = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            prescale, postscale = 1.0, 1.0
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=prescale,
                                  postscale_factor=postscale, process_set=self.process_set)
        return handle, ctx

    def _sparse_allreduce_grad_async(self, p: torch.Tensor, name: Optional[str]) -> Tuple[Any, Any]:
        """A sparse gradient: hvd.sparse_allreduce_async's callable."""
        return sparse_allreduce_async(p.grad, name=name, op=self.op, process_set=self.process_set), None

    def _grouped_allreduce_grad_async(self, ps: Tuple[torch.Tensor, ...]) -> Tuple[int, Any]:
        for p in ps:
            if p.grad is None:
                p.grad = p.data.new(p.size()).zero_()
            elif p.grad.is_sparse:
                if not self.sparse_as_dense:
                    raise ValueError(f"the gradient of {self._parameter_names.get(p)} is sparse; pass "
                                     "sparse_as_dense=True")
                p.grad = p.grad.to_dense()
        name = self._parameter_names.get(ps[0])
        compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in ps])
        if self.op == Average:
            prescale, postscale = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            prescale, postscale = 1.0, 1.0
        handle = grouped_allreduce_async_(list(compressed), name=name, op=self.op, prescale_factor=prescale,
                                          postscale_factor=postscale, process_set=self.process_set)
        return handle, ctxs

    def _make_hook(self, p: torch.Tensor) -> Any:
        def hook(*ignore: Any) -> None:
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times before call to step(). "
                        "Increase backward_passes_per_step to accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        handle, ctxs = self._grouped_allreduce_grad_async(group)
                        self._handles[group] = (handle, ctxs)
                        for gp in group:  # drop the placeholders of the group's earlier hooks
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    def synchronize(self) -> None:
        """Waits for every gradient's allreduce (submitting those that backward did not
        produce) and puts the results in the gradients. A rank outside the optimizer's
        process set reduces nothing."""
        if not self.process_set.included():
            self._synchronized = True
            return
        completed = set()
        for x in self._handles.keys():
            completed.update(x) if isinstance(x, tuple) else completed.add(x)
        missing = self._requires_update - completed
        if self._groups is not None:
            # A group whose hooks did not all fire is reduced whole, in the groups' order.
            for group in self._group_counts:
                if any(p in missing for p in group):
                    for gp in group:
                        self._handles.pop(gp, None)
                    self._handles[group] = self._grouped_allreduce_grad_async(group)
                    self._group_counts[group] = 0
        else:
            for p in sorted(missing, key=lambda q: self._parameter_names.get(q, "")):
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        try:
            for p, (handle, ctx) in self._handles.items():
                if isinstance(p, tuple):
                    outputs = synchronize(handle)
                    for gp, output, gctx in zip(p, outputs, ctx):
                        self._allreduce_delay[gp] = self.backward_passes_per_step
                        gp.grad.set_(self._compression.decompress(output, gctx))
                else:
                    # A callable handle: a sparse gradient's gathers, which it finishes.
                    output = handle() if callable(handle) else synchronize(handle)
                    self._allreduce_delay[p] = self.backward_passes_per_step
                    if p.grad.is_sparse:
                        aggregated = self._compression.decompress(output, ctx)
                        if not aggregated.is_sparse:  # sparse_as_dense
                            aggregated = aggregated.to_sparse()
                        p.grad.zero_().add_(aggregated)  # sparse tensors have no set_()
                    else:
                        p.grad.set_(self._compression.decompress(output, ctx))
        finally:
            self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """step() inside this context does not synchronize (call synchronize() first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Any = None) -> Any:
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)  # type: ignore[misc]

    def zero_grad(self, *args: Any, **kwargs: Any) -> None:
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)  # type: ignore[misc]


def _find_duplicates(lst: List[str]) -> set:
    seen, dups = set(), set()
    for el in lst:
        if el in seen:
            dups.add(el)
        seen.add(el)
    return dups


def DistributedOptimizer(optimizer: torch.optim.Optimizer,
                         named_parameters: Optional[Any] = None,
                         compression: Any = Compression.none,
                         backward_passes_per_step: int = 1,
                         op: int = Average,
                         gradient_predivide_factor: float = 1.0,
                         num_groups: int = 0,
                         groups: Optional[Union[int, List[List[torch.Tensor]]]] = None,
                         sparse_as_dense: bool = False,
                         process_set: ProcessSet = global_process_set) -> torch.optim.Optimizer:
    """An optimizer of the same class as `optimizer` (on its param_groups) whose gradients
    are averaged (op) across ranks before each step; see the module's docstring.

    named_parameters: model.named_parameters(), which names the allreduces (needed when
    ranks' backward order may differ). compression: Compression.none or .fp16.
    backward_passes_per_step: backward passes accumulated locally before the allreduce.
    gradient_predivide_factor: with op=Average, scale by 1/f before the sum and f/size()
    after. groups: an int (that many groups of parameters, each reduced as one grouped
    allreduce) or a list of lists of parameters; num_groups: its deprecated name.
    sparse_as_dense: reduce sparse gradients as dense tensors (else their indices and values
    are gathered from every rank)."""
    _check_process_set(process_set)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step <= 0:
        raise ValueError(f"backward_passes_per_step must be a positive int, got {backward_passes_per_step!r}")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        if isinstance(groups, list):
            seen = set()
            for group in groups:
                for p in group:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must consist of torch.Tensor.")
                    if id(p) in seen:
                        raise ValueError("A parameter can only appear once in groups.")
                    seen.add(id(p))
        elif not isinstance(groups, int) or groups <= 0:
            raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor.")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)
