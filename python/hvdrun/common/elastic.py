"""Elastic training, the part no framework owns (Horovod's horovod/common/elastic.py):
State, ObjectState and run_fn, the loop behind hvd.elastic.run.

Where this differs from Horovod (each where Horovod's users get hurt):
- check_host_updates() makes one small collective (a max-allreduce of four integers),
  and none outside an elastic job; Horovod broadcasts twice and pickles every time.
- Whether to sync after a reset is agreed by every rank of the NEW round (one
  max-allreduce of one integer): a worker that joined votes for it, so survivors that
  saw only removals cannot skip a sync the new worker waits in (Horovod's #3494).
- sync() sends only what differs from the source rank: one max-allreduce of each part's
  digests says which parts agree; only tensors whose digest differs are broadcast. After
  a failure with no new worker nothing moves. The source is the lowest rank of those with
  the newest commit (a worker that just joined has none): survivors a commit apart (one
  saved commit k, then its round failed before another did) resume from k.
- Commits are counted; after each reset rank 0 tells hvdrun the commit the round starts
  from, which hvdrun's reset line names ("restored commit 17").
- Saved objects are deep copies: restore() undoes changes made in place (a list
  appended to), which Horovod's references do not.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import pickle
import sys
from typing import Any, Callable, Dict, List, Sequence, Tuple

from hvdrun import _capi
from hvdrun._basics import rank
from hvdrun.common.exceptions import (HorovodInternalError, HostsUpdatedInterrupt, InvalidArgumentError,
                                      NotInitializedError, WorkerRemoved)

try:  # cloudpickle (as Horovod) when present: it also takes lambdas and local classes
    import cloudpickle as _pickler  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle  # type: ignore[assignment]

# Digests are 62-bit, so that a digest and its negation both fit an int64.
DIGEST_MASK = (1 << 62) - 1
# The sync source's key: (commits << _RANK_BITS) | (_RANK_MASK - rank); -1 without state.
_RANK_BITS = 24
_RANK_MASK = (1 << _RANK_BITS) - 1


def allreduce_max(values: Sequence[int]) -> List[int]:
    """The element-wise maximum of `values` (int64) over every rank: one collective."""
    return _capi.allreduce_int64(values, _capi.OP_MAX)


def agree(values: Sequence[int]) -> Tuple[List[int], List[int]]:
    """(max, min) over every rank of each of `values` (each within +-2^62): one collective."""
    out = allreduce_max(list(values) + [-v for v in values])
    n = len(values)
    return out[:n], [-v for v in out[n:]]


def bytes_digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") & DIGEST_MASK


def object_digest(obj: Any) -> int:
    """A digest of a picklable object (equal objects pickle equally in the same program)."""
    return bytes_digest(_pickler.dumps(obj, protocol=4))


class SyncPart:
    """One piece of a State that sync() brings to the source rank's value. `summary()`
    is (structure digest, content digest); parts whose structures agree everywhere and
    that have tensors send only the tensors whose digest differs; any other part that
    differs is sent whole with `sync_full(root)`."""

    has_tensors = False

    def summary(self) -> Tuple[int, int]:
        raise NotImplementedError()

    def tensor_digests(self) -> List[int]:
        """Per-tensor digests, in an order every rank shares (parts with has_tensors)."""
        return []

    def broadcast_tensors(self, indices: List[int], root: int) -> None:
        raise NotImplementedError()

    def sync_full(self, root: int) -> None:
        raise NotImplementedError()

    def after_sync(self) -> None:
        """Called on every rank once the part is in sync (moved or not)."""


def sync_parts(parts: Sequence[SyncPart], has_state: bool, commits: int = 0) -> Tuple[int, int]:
    """Brings every part to the source rank's value; returns (the source rank, its commit
    count). The source: the lowest rank among those with state and the most commits
    (`commits`: this rank's). Collectives:
    one allreduce when everything agrees; else one more for the per-tensor digests of the
    parts whose structures agree, the broadcasts of the tensors that differ, and each
    part whose structure differs sent whole. Every rank takes the same decisions: they
    are made from the results of the same allreduces."""
    summaries = [x for p in parts for x in p.summary()]
    hi, lo = agree(summaries + [(commits << _RANK_BITS) | (_RANK_MASK - rank()) if has_state else -1])
    root, source_commits = (_RANK_MASK - (hi[-1] & _RANK_MASK), hi[-1] >> _RANK_BITS) if hi[-1] >= 0 else (0, 0)
    by_tensor, whole = [], []
    for i, p in enumerate(parts):
        struct_same, content_same = hi[2 * i] == lo[2 * i], hi[2 * i + 1] == lo[2 * i + 1]
        if not (struct_same and content_same):
            (by_tensor if struct_same and p.has_tensors else whole).append(p)
    if by_tensor:
        _send_differing_tensors(by_tensor, root)
    for p in whole:
        p.sync_full(root)
    for p in parts:
        p.after_sync()
    return root, source_commits


def _send_differing_tensors(parts: Sequence[SyncPart], root: int) -> None:
    """One allreduce of the parts' per-tensor digests, then the broadcasts of the tensors
    whose digests differ somewhere."""
    lists = [p.tensor_digests() for p in parts]
    hi, lo = agree([d for ds in lists for d in ds])
    start = 0
    for p, ds in zip(parts, lists):
        differ = [k for k in range(len(ds)) if hi[start + k] != lo[start + k]]
        start += len(ds)
        if differ:
            p.broadcast_tensors(differ, root)


class _HostMessages:
    """Horovod's State._host_messages, which programs poll (Horovod's own elastic tests
    wait in `while state._host_messages.empty()`): empty() is False once this worker has
    been told of a change of hosts after the one its round was formed at."""

    def __init__(self, state: "State") -> None:
        self._state = state

    def empty(self) -> bool:
        seq, kinds = _capi.elastic_updates()
        return not (kinds or seq > self._state._seen_seq)


class State(object):
    """State kept in memory across the resets of an elastic job (Horovod's State).

    Args:
        bcast_object: broadcasts a picklable object from a rank to every rank.
        get_rank: returns this worker's rank.
    """

    def __init__(self, bcast_object: Callable[..., Any], get_rank: Callable[[], int]) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: List[Callable[[], Any]] = []
        self._host_messages = _HostMessages(self)
        self._seen_seq = _capi.elastic_updates()[0]  # the newest change this round knows of
        self._last_updated_timestamp = self._seen_seq  # Horovod's name; informational here
        self._has_state = False  # committed or synced once: may be the source of a sync
        self._commits = 0  # commit() calls in the state this worker holds (synced with it)

    def register_reset_callbacks(self, callbacks: Sequence[Callable[[], Any]]) -> None:
        """Functions to call after each reset (a worker added or removed), before the
        state is synced: for example to scale the learning rate to the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        self._seen_seq = _capi.elastic_updates()[0]
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state in memory (what a failure restores), then check_host_updates().
        Commits copy the state: commit less often than every batch where that costs."""
        self.save()
        self._commits += 1
        self._has_state = True
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises HostsUpdatedInterrupt on every rank at once when any rank has been told
        that hosts were added or removed. One small collective; none outside an elastic job."""
        if not _capi.elastic():
            return
        seq, kinds = _capi.elastic_updates()
        newer = 1 if (kinds or seq > self._seen_seq) else 0
        top_seq, any_newer, added, removed = allreduce_max(
            [seq, newer, 1 if kinds & _capi.HOSTS_ADDED else 0, 1 if kinds & _capi.HOSTS_REMOVED else 0])
        self._last_updated_timestamp = top_seq
        if any_newer:
            raise HostsUpdatedInterrupt(bool(removed and not added))

    def save(self) -> None:
        """Saves the state to host memory."""
        raise NotImplementedError()

    def restore(self) -> None:
        """Restores the last committed state, undoing any uncommitted modifications."""
        raise NotImplementedError()

    def sync(self) -> None:
        """Synchronizes the state across workers."""
        raise NotImplementedError()

    def reset(self) -> None:
        """Resets objects and variables after a reset event (before synchronization)."""


class _ObjectsPart(SyncPart):
    """The plain attributes of an ObjectState: compared by digest, sent whole."""

    def __init__(self, state: "ObjectState") -> None:
        self._state = state

    def summary(self) -> Tuple[int, int]:
        d = object_digest(self._state._saved_state) if self._state._saved_state else 0
        return d, 0

    def sync_full(self, root: int) -> None:
        bcast, saved = self._state._bcast_object, self._state._saved_state
        # (a program's own bcast_object may take only the object, as Horovod calls it)
        self._state._saved_state = bcast(saved) if root == 0 else bcast(saved, root)

    def after_sync(self) -> None:
        self._state._set_attrs()


class ObjectState(State):
    """State of plain Python objects, each given as a keyword argument and kept as an
    attribute (Horovod's ObjectState).

    Args:
        bcast_object: broadcasts a picklable object from a rank to every rank.
        get_rank: returns this worker's rank.
        kwargs: the objects, exposed as attributes.
    """

    def __init__(self, bcast_object: Callable[..., Any], get_rank: Callable[[], int], **kwargs: Any) -> None:
        self._bcast_object = bcast_object
        self._saved_state: Dict[str, Any] = copy.deepcopy(kwargs)
        self._set_attrs()
        super(ObjectState, self).__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        self._saved_state = {attr: copy.deepcopy(getattr(self, attr)) for attr in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            _, self._commits = sync_parts([_ObjectsPart(self)], self._has_state, self._commits)
        self._has_state = True

    def _set_attrs(self) -> None:
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


def _agree_to_sync(want: bool) -> bool:
    """Whether any rank of the round wants the state synced (one collective; none outside
    an elastic job, where the only entry is the first)."""
    if not _capi.elastic():
        return want
    return allreduce_max([1 if want else 0])[0] > 0


def _recoverable(e: HorovodInternalError) -> bool:
    """A failure of the round (a peer lost, a reset, a time-out) in an elastic job: not a
    call that was wrong and would fail again."""
    return _capi.elastic() and not isinstance(e, (InvalidArgumentError, NotInitializedError))


def run_fn(func: Callable[..., Any], reset: Callable[[], None]) -> Callable[..., Any]:
    """The loop of hvd.elastic.run around `func(state, ...)`: sync, call; on a failure of
    the round restore the last commit, on a change of hosts keep the state; then
    reset() (the next round), state.on_reset(), and again. A worker whose slot was
    removed exits with status 0."""

    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        skip_sync = False
        try:
            while True:
                try:
                    if _agree_to_sync(not skip_sync):
                        state.sync()
                    _tell_commit(state)
                    return func(state, *args, **kwargs)
                except HorovodInternalError as e:
                    if not _recoverable(e):
                        raise
                    state.restore()
                    skip_sync = False
                except HostsUpdatedInterrupt as e:
                    skip_sync = e.skip_sync
                _reset_until_joined(reset)
                state.on_reset()
        except WorkerRemoved as e:
            sys.stderr.write(f"hvdrun: {e}; exiting with status 0\n")
            sys.stderr.flush()
            raise

    return wrapper


def _tell_commit(state: State) -> None:
    """Rank 0 tells hvdrun the commit this round starts from (its reset line names it)."""
    if _capi.elastic() and rank() == 0:
        _capi.elastic_commit(getattr(state, "_commits", 0))


def _reset_until_joined(reset: Callable[[], None]) -> None:
    """reset() until it joins a round: again while the round being formed is itself reset
    (HVD_ERR_RESET from init); any other failure ends the job's loop."""
    while True:
        try:
            reset()
            return
        except HorovodInternalError as e:
            if e.code != _capi.ERR_RESET:
                raise
