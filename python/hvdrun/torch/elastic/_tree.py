"""State dicts as a skeleton plus a list of tensors, and tensor digests computed where the
tensors are (a CUDA tensor is never copied to the host to be compared).

flatten() turns a (nested) state dict into a skeleton, in which every tensor is a _Slot
holding its shape, dtype and device type, and the list of the tensors themselves, in an
order every rank shares; unflatten() builds a state dict back. Two ranks whose skeletons
are equal hold state dicts of the same structure and options, and differ at most in the
tensors' values, which digests() compares."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch

from hvdrun.common.elastic import DIGEST_MASK, bytes_digest


class _Slot:
    """The place of the i-th tensor in a skeleton."""

    __slots__ = ("i", "shape", "dtype", "device")

    def __init__(self, i: int, shape: Tuple[int, ...], dtype: str, device: str) -> None:
        self.i, self.shape, self.dtype, self.device = i, shape, dtype, device

    def _key(self) -> Tuple[Any, ...]:
        return (self.i, self.shape, self.dtype, self.device)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Slot) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> Any:  # what the structure digest pickles
        return (_Slot, self._key())


def _ordered_keys(d: Dict[Any, Any]) -> List[Any]:
    """A plain dict's keys in an order independent of insertion (an optimizer's per-
    parameter state is keyed by index); other mappings keep theirs."""
    keys = list(d.keys())
    if type(d) is dict and all(isinstance(k, int) for k in keys):
        return sorted(keys)
    return keys


def flatten(obj: Any) -> Tuple[Any, List[torch.Tensor]]:
    tensors: List[torch.Tensor] = []

    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            tensors.append(x)
            return _Slot(len(tensors) - 1, tuple(x.shape), str(x.dtype), x.device.type)
        if isinstance(x, dict):
            out = OrderedDict() if isinstance(x, OrderedDict) else {}
            for k in _ordered_keys(x):
                out[k] = walk(x[k])
            if hasattr(x, "_metadata"):  # a module's state_dict: versions of its submodules
                out._metadata = copy.deepcopy(x._metadata)  # type: ignore[union-attr]
            return out
        if isinstance(x, (list, tuple)) and type(x) in (list, tuple):
            return type(x)(walk(v) for v in x)
        return x

    return walk(obj), tensors


def unflatten(skeleton: Any, tensors: List[torch.Tensor]) -> Any:
    """The state dict of `skeleton` with `tensors` in its slots; new containers and copies of
    every other value, so that whoever loads it shares nothing mutable with the skeleton."""

    def walk(x: Any) -> Any:
        if isinstance(x, _Slot):
            return tensors[x.i]
        if isinstance(x, dict):
            out = OrderedDict() if isinstance(x, OrderedDict) else {}
            for k, v in x.items():
                out[k] = walk(v)
            if hasattr(x, "_metadata"):
                out._metadata = copy.deepcopy(x._metadata)  # type: ignore[union-attr]
            return out
        if isinstance(x, (list, tuple)) and type(x) in (list, tuple):
            return type(x)(walk(v) for v in x)
        return copy.deepcopy(x)

    return walk(skeleton)


def copy_into(saved: Optional[List[torch.Tensor]], live: List[torch.Tensor]) -> List[torch.Tensor]:
    """`saved` overwritten with `live`'s values when the tensors match in shape, dtype and
    device (a commit then allocates nothing), else new copies."""
    if saved is not None and len(saved) == len(live) and all(
            s.shape == t.shape and s.dtype == t.dtype and s.device == t.device for s, t in zip(saved, live)):
        with torch.no_grad():
            for s, t in zip(saved, live):
                s.copy_(t)
        return saved
    return [t.detach().clone() for t in live]


# Digest of a tensor's bytes read as int64 words w_i: sum of w_i * (A*i + B) modulo 2^64
# (A even, B odd: every weight odd, so a change of any one word always changes it).
def _s64(v: int) -> int:
    """v modulo 2^64 as a signed int64."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


_A = _s64(0x9E3779B97F4A7C15 * 2)
_B = _s64(0x632BE59BD9B4E019)
_CHUNK = 1 << 20
_weights: Dict[torch.device, torch.Tensor] = {}


def _words(t: torch.Tensor) -> Optional[torch.Tensor]:
    """t's bytes as int64 words (zero-padded), on t's device; None where torch cannot view them."""
    try:
        b = t.detach().contiguous().reshape(-1).view(torch.uint8)
    except (RuntimeError, TypeError):
        return None
    pad = (-b.numel()) % 8
    if pad:
        b = torch.cat([b, b.new_zeros(pad)])
    return b.view(torch.int64)


def _weights_on(device: torch.device) -> torch.Tensor:
    w = _weights.get(device)
    if w is None:
        w = _weights[device] = torch.arange(_CHUNK, dtype=torch.int64, device=device) * _A + _B
    return w


def _digest_on_device(w: torch.Tensor) -> torch.Tensor:
    weights = _weights_on(w.device)
    acc = torch.zeros((), dtype=torch.int64, device=w.device)
    for off in range(0, w.numel(), _CHUNK):
        c = w[off:off + _CHUNK]
        # weights of words off.. are (A*j + B) + A*off: the chunk's sum times A*off added
        acc = acc + (c * weights[:c.numel()]).sum() + c.sum() * _s64(_A * off)
    return acc


def digests(tensors: List[torch.Tensor]) -> List[int]:
    """A 62-bit digest of each tensor's bytes, computed on its device (one transfer per device)."""
    out: List[int] = [0] * len(tensors)
    by_device: Dict[torch.device, List[Tuple[int, torch.Tensor]]] = {}
    for i, t in enumerate(tensors):
        w = _words(t)
        if w is None:
            out[i] = bytes_digest(t.detach().cpu().contiguous().numpy().tobytes())
        else:
            by_device.setdefault(w.device, []).append((i, _digest_on_device(w)))
    for pairs in by_device.values():
        values = torch.stack([d for _, d in pairs]).cpu().tolist()
        for (i, _), v in zip(pairs, values):
            out[i] = int(v) & DIGEST_MASK
    return out
