"""Horovod's process sets (horovod/common/process_sets.py) on libhvdrun: subsets of the
job's ranks whose collectives run among themselves (each set over its own ring and
engine), concurrently with other sets'. Every rank adds and removes sets in the same order:
hvd.init(process_sets=[...]) at start, hvd.add_process_set / hvd.remove_process_set later
with HOROVOD_DYNAMIC_PROCESS_SETS=1 (or hvd.init(process_sets="dynamic"))."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from hvdrun import _capi
from hvdrun.common.exceptions import HorovodInternalError


class ProcessSet:
    """A set of ranks. Pass it to hvd.init(process_sets=[...]) or hvd.add_process_set();
    once registered, process_set_id is its number (0: global_process_set, every rank)."""

    process_set_id: Optional[int] = None
    ranks: Optional[List[int]] = None
    mpi_comm: Any = None

    def __init__(self, ranks_or_comm: Union[Sequence[int], Any]) -> None:
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            ranks = None
        if ranks is None or any(not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks or an mpi4py Comm object "
                             "(hvdrun takes ranks only)")
        self.ranks = ranks

    def _invalidate(self) -> None:
        self.process_set_id = None

    def size(self) -> Optional[int]:
        """The number of ranks in the set; None if it is not registered."""
        if self.process_set_id is None:
            return None
        return len(_info(self.process_set_id)[1])

    def rank(self) -> Optional[int]:
        """This rank's place in the set (collectives still name roots by hvd.rank()); None if
        the set is not registered; ValueError if this rank is not in it."""
        if self.process_set_id is None:
            return None
        r = _info(self.process_set_id)[0]
        if r < 0:
            raise ValueError("Process is not part of provided process set.")
        return r

    def included(self) -> Optional[bool]:
        """Whether this rank is in the set; None before its ranks are known."""
        if self.ranks is None:
            return None
        return _capi.topology("rank") in self.ranks

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__


def _info(process_set_id: int) -> Any:
    try:
        return _capi.process_set_info(process_set_id)
    except HorovodInternalError as e:
        raise ValueError(f"Process set does not exist or has not been registered: {e}") from None


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _get_process_set_ids_and_ranks() -> Dict[int, List[int]]:
    """{process_set_id: its ranks} of every registered set, 0 included."""
    return {i: _capi.process_set_info(i)[1] for i in _capi.process_set_ids()}


def _init_process_sets(process_sets: Sequence[ProcessSet]) -> None:
    """After hvd_init_process_sets: each object gets its set's id; a repeat of an earlier
    one (or of the global set) is left unregistered, and hvd.init raises ValueError then."""
    table = _get_process_set_ids_and_ranks()
    by_ranks = {tuple(r): i for i, r in table.items()}
    seen = {0}
    for ps in process_sets:
        ps.process_set_id = by_ranks.get(tuple(ps.ranks or ()))
        if ps.process_set_id in seen:
            ps._invalidate()
        else:
            seen.add(ps.process_set_id)
    global_process_set.ranks = table[0]
    for i, ps in enumerate(process_sets):
        if ps.process_set_id is None:
            raise ValueError(f"Horovod could not be initialized because process_sets entry number {i} is a "
                             f"duplicate: {ps}")


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Adds a set after hvd.init (every rank calls it, in the same order) and returns it.
    Needs HOROVOD_DYNAMIC_PROCESS_SETS=1; ValueError for a set whose ranks one has already."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    assert process_set.ranks is not None
    try:
        process_set.process_set_id = _capi.add_process_set(process_set.ranks)
    except HorovodInternalError as e:
        raise ValueError(str(e)) from None
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a set (every rank calls it, in the same order); False for the global set or
    one not registered. Needs HOROVOD_DYNAMIC_PROCESS_SETS=1."""
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0 or process_set_id not in _capi.process_set_ids():
        return False
    process_set._invalidate()
    try:
        _capi.remove_process_set(process_set_id)
    except HorovodInternalError as e:
        raise ValueError(str(e)) from None
    return True
