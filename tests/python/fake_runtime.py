"""A simulated elastic job behind hvdrun._capi, for the elastic tests: each worker is a
thread of the test, collectives really combine the workers' buffers, and the test decides
when the round fails, who is told of a change of hosts, and who is in the next round.

Installed with FakeJob.install(monkeypatch): the _capi functions that hvdrun.common.elastic
and hvdrun.torch call (init, shutdown, topology, allreduce, broadcast_async, wait,
elastic, elastic_updates, ...) then answer for the calling thread's worker. Every wait has
a deadline (a test fails, never hangs)."""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

try:  # torch before libhvdrun, where both are: a libhvdrun linked to an older system NCCL,
    # loaded first, makes torch 2's libtorch_cuda.so fail to load (its libnccl.so.2 is then
    # taken as the one already loaded: "undefined symbol: ncclCommResume"), and every test
    # module collected after this one imports torch
    import torch  # noqa: F401
except ImportError:
    pass

from hvdrun import _capi  # noqa: E402

DEADLINE = 20.0


class Killed(BaseException):
    """Raised in a worker the test kills: its thread ends as the process would."""


class _Worker:
    def __init__(self, wid: str) -> None:
        self.wid = wid
        self.initialized = False
        self.round = 0
        self.ncoll = 0
        self.seq = 0
        self.kinds = 0
        self.log: List[Tuple[int, str, int]] = []  # (round, kind, elements)
        self.inits = 0
        self.rank = -1
        self.size = -1


class _Meeting:
    def __init__(self) -> None:
        self.contrib: Dict[int, Any] = {}
        self.done = False


class FakeJob:
    def __init__(self, members: Sequence[str], elastic: bool = True) -> None:
        self.cv = threading.Condition()
        self.elastic = elastic
        self.round = 0
        self.failed = False  # the current round fails every collective (HVD_ERR_RESET)
        self.members: List[str] = []
        self.next_members: List[str] = list(members)
        self.arrived: set = set()
        self.seq = 0
        self.workers: Dict[str, _Worker] = {}
        self.meetings: Dict[Tuple[int, int], _Meeting] = {}
        self.init_errors: Dict[Tuple[str, int], int] = {}  # (worker, its n-th init) -> HVD_ERR_*
        self.local = threading.local()
        self.threads: Dict[str, threading.Thread] = {}
        self.outcome: Dict[str, Any] = {}
        self._handles = itertools.count(1)
        self.commits_told: List[Tuple[int, int]] = []  # (round, commit) from hvd_elastic_commit

    # --- the test's side ------------------------------------------------------------------
    def spawn(self, wid: str, fn: Callable[[], Any]) -> None:
        """Starts worker `wid` (a thread) running fn(); its result, exception or exit code
        goes to outcome[wid]."""
        def body() -> None:
            self.local.wid = wid
            try:
                self.outcome[wid] = ("returned", fn())
            except SystemExit as e:
                self.outcome[wid] = ("exit", e.code)
            except Killed:
                self.outcome[wid] = ("killed", None)
            except BaseException as e:  # noqa: BLE001 - reported to the test
                self.outcome[wid] = ("raised", e)
        with self.cv:
            self.workers.setdefault(wid, _Worker(wid))
        t = threading.Thread(target=body, name=f"fake-{wid}", daemon=True)
        self.threads[wid] = t
        t.start()

    def join(self) -> Dict[str, Any]:
        """Waits for every worker, those spawned by workers meanwhile too."""
        joined: set = set()
        while set(self.threads) - joined:
            for wid in sorted(set(self.threads) - joined):
                self.threads[wid].join(DEADLINE)
                assert not self.threads[wid].is_alive(), f"worker {wid} still running after {DEADLINE} s"
                joined.add(wid)
        return self.outcome

    def fail_round(self, next_members: Optional[Sequence[str]] = None) -> None:
        """The round fails (a worker lost): every collective of it fails with HVD_ERR_RESET;
        the next round is next_members (default: the same workers)."""
        with self.cv:
            self.failed = True
            self.next_members = list(next_members if next_members is not None else self.members)
            self.cv.notify_all()

    def kill(self, next_members: Optional[Sequence[str]] = None) -> None:
        """Kills the calling worker: its round fails, the next is formed without it."""
        me = self._me().wid
        self.fail_round([m for m in (next_members or self.members) if m != me])
        raise Killed()

    def notify(self, kinds: int, next_members: Sequence[str], to: Optional[Sequence[str]] = None) -> None:
        """The rendezvous tells workers `to` (default: all of the round) of a change of hosts;
        the next round is next_members."""
        with self.cv:
            self.seq += 1
            self.next_members = list(next_members)
            for wid in (to if to is not None else self.members):
                w = self.workers[wid]
                w.seq, w.kinds = self.seq, w.kinds | kinds

    def collectives(self, wid: str, kind: Optional[str] = None, round_: Optional[int] = None) -> List[Tuple[int, str, int]]:
        return [e for e in self.workers[wid].log if (kind is None or e[1] == kind)
                and (round_ is None or e[0] == round_)]

    # --- the _capi side -------------------------------------------------------------------
    def _me(self) -> _Worker:
        return self.workers[self.local.wid]

    def _wait(self, pred: Callable[[], bool], what: str) -> None:
        if not self.cv.wait_for(pred, DEADLINE):
            raise AssertionError(f"fake runtime: {self.local.wid} waited {DEADLINE} s for {what}")

    def init(self) -> None:
        with self.cv:
            w = self._me()
            w.inits += 1
            rc = self.init_errors.get((w.wid, w.inits))
            if rc is not None:
                raise _capi.exception(rc, f"hvd_init failed (fake, error {rc})")
            if w.wid not in self.next_members:
                raise _capi.exception(_capi.ERR_REMOVED, "hvd_init: this slot was removed (fake)")
            self.arrived.add(w.wid)
            if self.arrived >= set(self.next_members):
                self.round += 1
                self.members, self.failed, self.arrived = list(self.next_members), False, set()
                for m in self.members:
                    self.workers[m].kinds = 0  # relative to the change this round was formed at
                    self.workers[m].seq = self.seq
                self.cv.notify_all()
            else:
                target = self.round + 1
                self._wait(lambda: self.round >= target, "the next round")
            w.round, w.ncoll, w.initialized = self.round, 0, True
            w.rank, w.size = self.members.index(w.wid), len(self.members)

    def shutdown(self) -> None:
        self._me().initialized = False

    def initialized(self) -> bool:
        return self._me().initialized

    def topology(self, which: str) -> int:
        w = self._me()
        if not w.initialized:
            return -1
        r, n = w.rank, w.size
        return {"rank": r, "size": n, "local_rank": r, "local_size": n, "cross_rank": 0, "cross_size": 1}[which]

    def process_set_ids(self) -> List[int]:
        return [0]  # the global set only: hvd.init registers no other here

    def process_set_info(self, process_set: int) -> Tuple[int, List[int]]:
        w = self._me()
        if process_set != 0 or not w.initialized:
            raise _capi.HorovodInternalError(f"fake hvd_process_set_info({process_set}): not registered")
        return w.rank, list(range(w.size))

    def elastic_on(self) -> bool:
        return self.elastic

    def elastic_updates(self) -> Tuple[int, int]:
        w = self._me()
        return (w.seq, w.kinds) if self.elastic else (0, 0)

    def _meet(self, kind: str, elements: int, payload: Any, combine: Callable[[Dict[int, Any]], None]) -> None:
        w = self._me()
        if not w.initialized:
            raise _capi.exception(_capi.ERR_NOT_INITIALIZED, "not initialized (fake)")
        with self.cv:
            if self.failed or w.round != self.round:
                raise _capi.exception(_capi.ERR_RESET, f"{kind}: the round is being reset (fake)")
            key = (w.round, w.ncoll)
            w.ncoll += 1
            w.log.append((w.round, kind, elements))
            m = self.meetings.setdefault(key, _Meeting())
            m.contrib[w.rank] = (kind, payload)
            if len(m.contrib) == len(self.members):
                kinds = {k for k, _ in m.contrib.values()}
                assert len(kinds) == 1, f"fake runtime: collective {key} differs across ranks: {m.contrib}"
                combine({r: p for r, (_, p) in m.contrib.items()})
                m.done = True
                self.cv.notify_all()
            else:
                self._wait(lambda: m.done or self.failed or self.round != key[0], f"collective {key} ({kind})")
                if not m.done:
                    raise _capi.exception(_capi.ERR_RESET, f"{kind}: the round is being reset (fake)")

    def allreduce(self, send: int, recv: int, count: int, dtype: int, op: int) -> None:
        ctype = {_capi.INT64: ctypes.c_int64, _capi.FLOAT32: ctypes.c_float, _capi.FLOAT64: ctypes.c_double}[dtype]
        assert op in (_capi.OP_MAX, _capi.OP_SUM), op
        values = list((ctype * count).from_address(send))

        def combine(contrib: Dict[int, Any]) -> None:
            columns = list(zip(*[v for v, _ in contrib.values()]))
            out = [max(c) if op == _capi.OP_MAX else sum(c) for c in columns]
            for _, r in contrib.values():
                ctypes.memmove(r, (ctype * count)(*out), ctypes.sizeof(ctype) * count)

        self._meet("allreduce", count, (values, recv), combine)

    def broadcast_async(self, name: str, buf: int, count: int, dtype: int, root: int) -> int:
        nbytes = count * _capi.DTYPE_SIZES[dtype]

        def combine(contrib: Dict[int, Any]) -> None:
            src = contrib[root]
            for r, dst in contrib.items():
                if r != root and nbytes:
                    ctypes.memmove(dst, src, nbytes)

        self._meet("broadcast", count, buf, combine)
        return next(self._handles)

    def wait(self, handle: int, what: str) -> None:
        return None

    def elastic_commit(self, commit: int) -> None:
        with self.cv:
            self.commits_told.append((self._me().round, commit))

    def install(self, monkeypatch: Any) -> "FakeJob":
        for name, fn in (("init", self.init), ("shutdown", self.shutdown), ("initialized", self.initialized),
                         ("topology", self.topology), ("elastic", self.elastic_on),
                         ("process_set_ids", self.process_set_ids), ("process_set_info", self.process_set_info),
                         ("elastic_updates", self.elastic_updates), ("allreduce", self.allreduce),
                         ("broadcast_async", self.broadcast_async), ("wait", self.wait),
                         ("elastic_commit", self.elastic_commit)):
            monkeypatch.setattr(_capi, name, fn)
        return self


def run_workers(job: FakeJob, fns: Dict[str, Callable[[], Any]]) -> Dict[str, Any]:
    for wid, fn in fns.items():
        job.spawn(wid, fn)
    return job.join()
