"""TorchState (horovod/torch/elastic/state.py): a model, an optimizer, ElasticSamplers and
any other attributes, committed, restored and synced across the resets of an elastic job.

Each model, optimizer and sampler has a handler (chosen by type from the registry, as
Horovod's). Unlike Horovod's handlers, which deep-copy the state dicts at every commit and
broadcast all of them at every sync:
- a commit copies the tensors into the copies made at the previous commit (nothing is
  allocated while the structure stays the same);
- restore() gives the optimizer copies of the saved tensors (torch 2's load_state_dict
  keeps the tensors it is given: later steps would change the saved commit);
- sync() sends only the tensors whose digest differs from the source rank's (see
  hvdrun.common.elastic.sync_parts): after a failure with no new worker, nothing.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Tuple, Type

import torch

from hvdrun.common.elastic import ObjectState, SyncPart, _ObjectsPart, object_digest, sync_parts
from hvdrun.torch.elastic import _tree
from hvdrun.torch.elastic.sampler import ElasticSampler
from hvdrun.torch.functions import (broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from hvdrun.torch.mpi_ops import rank


class StateHandler(object):
    """Saves, restores and syncs one attribute of a TorchState (Horovod's StateHandler).
    sync() sends the whole value from rank 0; sync_part(), where a handler has one, lets
    TorchState.sync() send only what differs."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def save(self) -> None:
        raise NotImplementedError()

    def restore(self) -> None:
        raise NotImplementedError()

    def sync(self) -> None:
        raise NotImplementedError()

    def reset(self) -> None:
        """After a reset, before the state is synced (or not)."""

    def sync_part(self, name: str) -> Optional[SyncPart]:
        """What TorchState.sync() compares and sends for the attribute `name` (None: sync())."""
        return None

    def set_value(self, value: Any) -> None:
        self.value = value
        self.save()


class _TensorsPart(SyncPart):
    """A state dict held by a handler: the structure digest covers everything but the
    tensors' values, which are compared tensor by tensor."""

    has_tensors = True

    def __init__(self, handler: "_TreeHandler", name: str) -> None:
        self._handler = handler
        self._name = name
        self._skeleton, self._tensors = _tree.flatten(handler.live_state())
        self._digests = _tree.digests(self._tensors)

    def summary(self) -> Tuple[int, int]:
        return object_digest(self._skeleton), object_digest(self._digests)

    def tensor_digests(self) -> List[int]:
        return self._digests

    def broadcast_tensors(self, indices: List[int], root: int) -> None:
        broadcast_parameters([(f"elastic.{self._name}.{i}", self._tensors[i]) for i in indices], root)

    def sync_full(self, root: int) -> None:
        self._handler.sync_from(root)


class _TreeHandler(StateHandler):
    """A value with a state_dict(): saved as its skeleton and copies of its tensors."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self._skeleton: Any = None
        self._saved: Optional[List[torch.Tensor]] = None
        self.save()

    def live_state(self) -> Any:
        return self.value.state_dict()

    def save(self) -> None:
        self._skeleton, tensors = _tree.flatten(self.live_state())
        self._saved = _tree.copy_into(self._saved, tensors)

    def saved_state(self, copies: bool) -> Any:
        tensors = [t.clone() for t in self._saved] if copies else self._saved
        return _tree.unflatten(self._skeleton, tensors)

    def sync(self) -> None:
        self.sync_from(0)

    def sync_from(self, root: int) -> None:
        raise NotImplementedError()

    def sync_part(self, name: str) -> Optional[SyncPart]:
        return _TensorsPart(self, name)


class ModelStateHandler(_TreeHandler):
    def restore(self) -> None:
        # (a module copies what it loads)
        self.value.load_state_dict(self.saved_state(copies=False))

    def sync_from(self, root: int) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=root)


class OptimizerStateHandler(_TreeHandler):
    def restore(self) -> None:
        # (torch 2's optimizer keeps the tensors it loads: they must not be the saved ones)
        self.value.load_state_dict(self.saved_state(copies=True))

    def sync_from(self, root: int) -> None:
        broadcast_optimizer_state(self.value, root_rank=root)


class _SamplerPart(SyncPart):
    def __init__(self, handler: "SamplerStateHandler") -> None:
        self._handler = handler
        self._state = handler.value.state_dict()
        self._moved = False

    def summary(self) -> Tuple[int, int]:
        return object_digest(self._state), 0

    def sync_full(self, root: int) -> None:
        self._handler.value.load_state_dict(broadcast_object(self._state, root))
        self._moved = True

    def after_sync(self) -> None:
        if not self._moved:
            self._handler.value.reset()  # repartitioned at the round's size and rank


class SamplerStateHandler(StateHandler):
    def __init__(self, sampler: ElasticSampler) -> None:
        super().__init__(sampler)
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def save(self) -> None:
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved_sampler_state)

    def sync(self) -> None:
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))

    def reset(self) -> None:
        self.value.reset()

    def sync_part(self, name: str) -> Optional[SyncPart]:
        return _SamplerPart(self)


_handler_registry: List[Tuple[Type[Any], Type[StateHandler]]] = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry() -> List[Tuple[Type[Any], Type[StateHandler]]]:
    return _handler_registry


def set_handler_registry(registry: List[Tuple[Type[Any], Type[StateHandler]]]) -> None:
    global _handler_registry
    _handler_registry = registry


def _get_handler(v: Any) -> Optional[StateHandler]:
    for handler_type, handler_cls in _handler_registry:
        if isinstance(v, handler_type):
            return handler_cls(v)
    return None


def _get_handlers(kwargs: Dict[str, Any]) -> Tuple[Dict[str, StateHandler], Dict[str, Any]]:
    handlers, remainder = {}, {}
    for k, v in kwargs.items():
        handler = _get_handler(v)
        if handler:
            handlers[k] = handler
        else:
            remainder[k] = v
    return handlers, remainder


class TorchState(ObjectState):
    """State of a PyTorch training process (Horovod's TorchState).

    Models, optimizers and ElasticSamplers given as keyword arguments are handled by
    their type; every other keyword argument is an attribute kept as a Python object.

    Args:
        model: a torch.nn.Module (optional).
        optimizer: a torch.optim.Optimizer (optional).
        kwargs: more models, optimizers, samplers and attributes.
    """

    def __init__(self, model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        kwargs.update(dict(model=model, optimizer=optimizer))
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super(TorchState, self).__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super(TorchState, self).save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super(TorchState, self).restore()

    def reset(self) -> None:
        for handler in self._handlers.values():
            handler.reset()

    def sync(self) -> None:
        parts: List[SyncPart] = []
        own: List[StateHandler] = []  # handlers of the program's own, synced Horovod's way
        for name, handler in self._handlers.items():
            part = handler.sync_part(name)
            if part is None:
                own.append(handler)
            else:
                parts.append(part)
        if self._saved_state:
            parts.append(_ObjectsPart(self))
        _, self._commits = sync_parts(parts, self._has_state, self._commits)
        for handler in own:
            handler.sync()
        self._has_state = True

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, name) and name in self._handlers:
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)
