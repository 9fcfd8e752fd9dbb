"""hvdrun.torch's handles: an int per asynchronous call, holding its libhvdrun handles, the
tensors libhvdrun reads or writes (alive until synchronize) and how to finish it; and the
names of unnamed operations ("<op>.noname.<n>")."""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from hvdrun import _capi
from hvdrun.common.exceptions import HorovodInternalError

class _Pending:
    __slots__ = ("what", "c_handles", "keep", "finish")

    def __init__(self, what: str, c_handles: List[int], keep: Tuple[Any, ...],
                 finish: Callable[["_Pending"], Any]) -> None:
        self.what = what
        self.c_handles = c_handles
        self.keep = keep  # the tensors libhvdrun reads or writes: alive until synchronize
        self.finish = finish


_lock = threading.Lock()
_pending: Dict[int, _Pending] = {}
_handle_ids = itertools.count(1)
_noname_ids: Dict[str, "itertools.count[int]"] = {}


def _op_name(kind: str, name: Optional[str], process_set: int = 0) -> str:
    """Horovod's name of an operation; unnamed ones are counted per kind and process set
    (each set pairs its own calls: calls in other sets do not move its count)."""
    if name is not None:
        return f"{kind}.{name}"
    with _lock:
        counter = _noname_ids.setdefault(f"{kind}@{process_set}" if process_set else kind, itertools.count())
        return f"{kind}.noname.{next(counter)}"


def _register(p: _Pending) -> int:
    with _lock:
        h = next(_handle_ids)
        _pending[h] = p
    return h


def _wait_all(p: _Pending) -> None:
    """Waits every C handle of p (each is released even when an earlier one failed)."""
    err: Optional[BaseException] = None
    for c in p.c_handles:
        try:
            _capi.wait(c, p.what)
        except HorovodInternalError as e:
            err = err or e
    if err is not None:
        raise err


def release_all() -> int:
    """Forgets every pending operation and restarts the names of unnamed ones: after
    hvd.shutdown() in an elastic reset their libhvdrun handles are gone, and the next
    round's ranks (some of them new processes) must name unnamed operations alike.
    Returns how many were pending."""
    with _lock:
        n = len(_pending)
        _pending.clear()
        _noname_ids.clear()
    return n


def _combine(what: str, submits: List[Callable[[], int]]) -> int:
    """Submits the parts (each call returns a handle) and returns one handle for them all:
    synchronize() returns their outputs as a list (and raises the first failure after every
    part has been waited for, so that none is left pending). A part refused at submission
    raises here, after the parts already submitted have finished."""
    handles: List[int] = []
    try:
        for submit in submits:
            handles.append(submit())
    except HorovodInternalError:
        for h in handles:
            try:
                synchronize(h)
            except HorovodInternalError:
                pass
        raise
    with _lock:
        parts = [_pending.pop(h) for h in handles]

    def finish(p: _Pending) -> List[Any]:
        outs: List[Any] = []
        err: Optional[BaseException] = None
        for q in parts:
            try:
                outs.append(q.finish(q))
            except HorovodInternalError as e:
                err = err or e
        if err is not None:
            raise err
        return outs

    return _register(_Pending(what, [c for q in parts for c in q.c_handles], tuple(q.keep for q in parts), finish))


def poll(handle: int) -> bool:
    """Whether the asynchronous operation `handle` has finished (synchronize() then does
    not block)."""
    with _lock:
        p = _pending.get(handle)
    if p is None:
        raise ValueError(f"poll: handle {handle} was not created or has been synchronized already")
    for c in p.c_handles:
        r = _capi.poll(c)
        if r < 0:
            raise HorovodInternalError(f"poll: libhvdrun does not know the handle of {p.what}")
        if r == 0:
            return False
    return True


def synchronize(handle: int) -> Any:
    """Waits for the asynchronous operation `handle` and returns its output (as Horovod:
    None for a handle already synchronized). Raises HorovodInternalError when it failed."""
    with _lock:
        p = _pending.pop(handle, None)
    if p is None:
        return None
    return p.finish(p)
