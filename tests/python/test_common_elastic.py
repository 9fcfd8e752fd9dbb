"""hvdrun/common/elastic.py: State.check_host_updates, ObjectState and the loop of
hvd.elastic.run (run_fn), on a simulated elastic job of worker threads (fake_runtime.py)."""
from __future__ import annotations

import threading
from typing import Any, Dict, List

import pytest

from fake_runtime import FakeJob, run_workers
from hvdrun import _capi
from hvdrun.common import elastic
from hvdrun.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt, InvalidArgumentError, WorkerRemoved

ADDED, REMOVED = _capi.HOSTS_ADDED, _capi.HOSTS_REMOVED


def bcast_object(obj: Any, root: int = 0) -> Any:
    """ObjectState's bcast_object over the fake runtime (the objects' sizes, then bytes)."""
    import ctypes
    import pickle
    data = pickle.dumps(obj) if elastic.rank() == root else b""
    n = ctypes.c_int64(len(data))
    _capi.broadcast_async("obj.sz", ctypes.addressof(n), 1, _capi.INT64, root)
    buf = ctypes.create_string_buffer(data, n.value) if data else ctypes.create_string_buffer(n.value)
    _capi.broadcast_async("obj", ctypes.addressof(buf), n.value, _capi.UINT8, root)
    return pickle.loads(buf.raw)


def object_state(**kwargs: Any) -> elastic.ObjectState:
    return elastic.ObjectState(bcast_object, elastic.rank, **kwargs)


@pytest.fixture
def job3(monkeypatch: pytest.MonkeyPatch) -> FakeJob:
    return FakeJob(["a", "b", "c"]).install(monkeypatch)


# --- check_host_updates ----------------------------------------------------------------------
def test_check_host_updates_with_nothing_changed_is_one_small_collective(job3: FakeJob) -> None:
    def worker() -> int:
        _capi.init()
        s = object_state(x=1)
        for _ in range(5):
            s.check_host_updates()
        return s._last_updated_timestamp

    out = run_workers(job3, {w: worker for w in "abc"})
    assert all(o == ("returned", 0) for o in out.values()), out
    for w in "abc":  # five calls, five allreduces of four integers, nothing else
        assert job3.collectives(w) == [(1, "allreduce", 4)] * 5, job3.collectives(w)


def test_check_host_updates_makes_no_collective_outside_an_elastic_job(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a", "b"], elastic=False).install(monkeypatch)

    def worker() -> None:
        _capi.init()
        s = object_state(x=1)
        s.commit()
        s.check_host_updates()

    out = run_workers(job, {w: worker for w in "ab"})
    assert all(o[0] == "returned" for o in out.values()), out
    assert job.collectives("a") == [] and job.collectives("b") == []


@pytest.mark.parametrize("told,skip_sync", [
    ({"a": ADDED}, False),                  # only rank 0 was told: every rank still raises
    ({"c": REMOVED}, True),                 # only removals: the sync may be skipped
    ({"b": REMOVED, "c": ADDED}, False),    # one rank saw a removal, another an addition
])
def test_every_rank_raises_at_the_same_commit_with_one_skip_sync(job3: FakeJob, told: Dict[str, int],
                                                                 skip_sync: bool) -> None:
    barrier = threading.Barrier(3, timeout=20)

    def worker() -> Any:
        _capi.init()
        s = object_state(step=0)
        s.commit()
        barrier.wait()
        if job3.local.wid == "a":
            for wid, kinds in told.items():
                job3.notify(kinds, ["a", "b", "c"], to=[wid])
        barrier.wait()
        try:
            s.commit()
        except HostsUpdatedInterrupt as e:
            return e.skip_sync
        return "no interrupt"

    out = run_workers(job3, {w: worker for w in "abc"})
    assert {w: o for w, o in out.items()} == {w: ("returned", skip_sync) for w in "abc"}, out
    assert all(len(job3.collectives(w)) == 2 for w in "abc")  # one per commit


def test_host_messages_show_a_change_and_horovods_timestamp_reset_raises_nothing(job3: FakeJob) -> None:
    barrier = threading.Barrier(3, timeout=20)

    def worker() -> Any:
        _capi.init()
        s = object_state(step=0)
        before = s._host_messages.empty()
        s._last_updated_timestamp = 0  # Horovod's elastic tests do this: no change, no interrupt
        s.commit()
        barrier.wait()
        if job3.local.wid == "a":
            job3.notify(ADDED, ["a", "b", "c"], to=["a"])
        barrier.wait()
        after = s._host_messages.empty()
        with pytest.raises(HostsUpdatedInterrupt):
            s.commit()
        return before, after

    out = run_workers(job3, {w: worker for w in "abc"})
    assert out == {"a": ("returned", (True, False)), "b": ("returned", (True, True)),
                   "c": ("returned", (True, True))}, out


# --- ObjectState ---------------------------------------------------------------------------------
def test_object_state_restores_the_commit_even_of_objects_changed_in_place(job3: FakeJob) -> None:
    def worker() -> Any:
        _capi.init()
        s = object_state(epoch=0, seen=[])
        s.epoch, _ = 1, s.seen.append("x")
        s.commit()
        s.epoch, _ = 2, s.seen.append("y")
        s.restore()
        first = (s.epoch, list(s.seen))
        s.seen.append("z")  # what restore() gave is a copy too
        s.restore()
        return first, (s.epoch, s.seen)

    out = run_workers(job3, {w: worker for w in "abc"})
    assert all(o == ("returned", ((1, ["x"]), (1, ["x"]))) for o in out.values()), out


def test_object_state_sync_sends_nothing_when_all_agree_and_rank0s_when_not(job3: FakeJob) -> None:
    def worker() -> Any:
        _capi.init()
        same = object_state(epoch=3, names=["p", "q"])
        same.sync()
        n_same = len(job3.collectives(job3.local.wid))
        differ = object_state(epoch=10 + elastic.rank())
        differ.sync()
        return n_same, differ.epoch, [k for _, k, _ in job3.collectives(job3.local.wid)][n_same:]

    out = run_workers(job3, {w: worker for w in "abc"})
    for w in "abc":
        assert out[w] == ("returned", (1, 10, ["allreduce", "broadcast", "broadcast"])), out


# --- run_fn: the loop of hvd.elastic.run ------------------------------------------------------
class Recorder:
    """What a worker's run did: entries of func, restores, syncs, resets."""

    def __init__(self) -> None:
        self.entries: List[Any] = []
        self.restores = 0
        self.syncs = 0


def recorded_state(rec: Recorder, **kwargs: Any) -> elastic.ObjectState:
    s = object_state(**kwargs)
    restore, sync = s.restore, s.sync

    def counted_restore() -> None:
        rec.restores += 1
        restore()

    def counted_sync() -> None:
        rec.syncs += 1
        sync()

    s.restore, s.sync = counted_restore, counted_sync  # type: ignore[method-assign]
    return s


def reset() -> None:
    _capi.shutdown()
    _capi.init()


def elastic_worker(job: FakeJob, train: Any, recs: Dict[str, Recorder], **state: Any) -> Any:
    """A worker's body: init, then run_fn(train) on a recorded ObjectState(**state)."""
    def worker() -> Any:
        _capi.init()
        return elastic.run_fn(train, reset)(recorded_state(recs[job.local.wid], **state))
    return worker


def test_a_failed_round_restores_the_commit_and_goes_on_at_the_new_size(job3: FakeJob) -> None:
    recs = {w: Recorder() for w in "abc"}

    def train(state: elastic.ObjectState) -> Any:
        rec = recs[job3.local.wid]
        rec.entries.append((state.batch, elastic.rank(), _capi.topology("size")))
        while state.batch < 6:
            if state.batch == 4 and job3.local.wid == "c":
                job3.kill()
            elastic.allreduce_max([state.batch])  # a step's collective
            state.batch += 1
            if state.batch % 3 == 0:
                state.commit()
        return state.batch

    out = run_workers(job3, {w: elastic_worker(job3, train, recs, batch=0) for w in "abc"})
    assert out == {"a": ("returned", 6), "b": ("returned", 6), "c": ("killed", None)}, out
    for w in "ab":  # back to the commit at batch 3, at size 2
        assert recs[w].entries == [(0, "ab".index(w), 3), (3, "ab".index(w), 2)], recs[w].entries
        assert recs[w].restores == 1 and recs[w].syncs == 2, vars(recs[w])
        # the second round: the vote, the sync's digest allreduce (all agree: nothing sent),
        # then the steps and a commit
        kinds = [k for _, k, _ in job3.collectives(w, round_=2)]
        assert kinds[:2] == ["allreduce", "allreduce"] and "broadcast" not in kinds, kinds
    # rank 0 told hvdrun each round's commit: none yet in round 1, the first (batch 3) in round 2
    assert job3.commits_told == [(1, 0), (2, 1)], job3.commits_told


@pytest.mark.parametrize("kinds,synced", [(REMOVED, False), (ADDED | REMOVED, True)])
def test_a_change_of_hosts_resets_without_restore_and_syncs_unless_only_removed(job3: FakeJob, kinds: int,
                                                                               synced: bool) -> None:
    recs = {w: Recorder() for w in "abc"}
    barrier = threading.Barrier(3, timeout=20)

    def train(state: elastic.ObjectState) -> Any:
        recs[job3.local.wid].entries.append((state.batch, _capi.topology("size")))
        while state.batch < 4:
            state.batch += 1
            if state.batch == 2 and _capi.topology("size") == 3:
                barrier.wait()
                if job3.local.wid == "a":
                    job3.notify(kinds, ["a", "b"])
                barrier.wait()
            state.commit()
        return state.batch

    out = run_workers(job3, {w: elastic_worker(job3, train, recs, batch=0) for w in "abc"})
    assert out == {"a": ("returned", 4), "b": ("returned", 4), "c": ("exit", 0)}, out
    for w in "ab":
        assert recs[w].entries == [(0, 3), (2, 2)], recs[w].entries
        assert recs[w].restores == 0 and recs[w].syncs == (2 if synced else 1), vars(recs[w])
        assert job3.collectives(w, round_=2)[0] == (2, "allreduce", 1)  # the vote, agreed


def test_survivors_that_saw_only_removals_still_sync_a_worker_that_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    """Horovod's #3494: survivors skip the sync, the new worker waits in it forever. Here
    every rank of the new round votes, and the new worker's vote wins."""
    job = FakeJob(["a", "b", "c"]).install(monkeypatch)
    recs = {w: Recorder() for w in "abcd"}
    barrier = threading.Barrier(3, timeout=20)

    def train(state: elastic.ObjectState) -> Any:
        while state.batch < 4:
            state.batch += 1
            if state.batch == 2 and _capi.topology("size") == 3:
                barrier.wait()
                if job.local.wid == "a":  # c removed; d comes before the next round forms
                    job.notify(REMOVED, ["a", "b", "d"])
                    job.spawn("d", new_worker)
                barrier.wait()
            state.commit()
        return state.batch, elastic.rank()

    new_worker = elastic_worker(job, train, recs, batch=0)
    for w in "abc":
        job.spawn(w, new_worker)
    out = job.join()
    assert out == {"a": ("returned", (4, 0)), "b": ("returned", (4, 1)), "c": ("exit", 0),
                   "d": ("returned", (4, 2))}, out
    assert [recs[w].syncs for w in "abd"] == [2, 2, 1]


def test_the_sync_source_is_the_lowest_rank_with_state_not_a_new_rank_0(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a", "b"]).install(monkeypatch)
    barrier = threading.Barrier(2, timeout=20)

    def train(state: elastic.ObjectState) -> Any:
        while state.batch < 5:
            state.batch += 1
            if state.batch == 2 and job.local.wid != "n":
                barrier.wait()
                if job.local.wid == "a":
                    job.notify(ADDED, ["n", "a", "b"])  # the new worker becomes rank 0
                    job.spawn("n", worker)
                barrier.wait()
            state.commit()
        return state.batch, state.trail

    def worker() -> Any:
        _capi.init()
        return elastic.run_fn(train, reset)(object_state(batch=0, trail="from " + job.local.wid))

    job.spawn("a", worker)
    job.spawn("b", worker)
    out = job.join()
    assert out == {"a": ("returned", (5, "from a")), "b": ("returned", (5, "from a")),
                   "n": ("returned", (5, "from a"))}, out


def test_init_retries_a_reset_round_and_ends_the_loop_on_another_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's reset limit: the next round is refused (an init error other than
    HVD_ERR_RESET): run raises it after the resets it made."""
    job = FakeJob(["a"]).install(monkeypatch)
    job.init_errors = {("a", 2): _capi.ERR_RESET, ("a", 4): _capi.ERR_RESET, ("a", 5): _capi.ERR_RENDEZVOUS}
    rec = Recorder()

    def train(state: elastic.ObjectState) -> Any:
        rec.entries.append(state.batch)
        state.batch += 1
        job.fail_round()
        elastic.allreduce_max([0])

    out = run_workers(job, {"a": elastic_worker(job, train, {"a": rec}, batch=0)})
    kind, err = out["a"]
    assert kind == "raised" and isinstance(err, HorovodInternalError) and err.code == _capi.ERR_RENDEZVOUS, out
    # inits: 1 start, 2 RESET then 3 joined, 4 RESET then 5 refused
    assert rec.entries == [0, 0] and rec.restores == 2 and job.workers["a"].inits == 5


def test_a_removed_worker_exits_with_status_0_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                          capfd: pytest.CaptureFixture) -> None:
    job = FakeJob(["a", "b"]).install(monkeypatch)

    def train(state: elastic.ObjectState) -> Any:
        if _capi.topology("size") == 2 and elastic.rank() == 0:
            job.fail_round(["a"])
        elastic.allreduce_max([0])
        return "done"

    def worker() -> Any:
        _capi.init()
        return elastic.run_fn(train, reset)(object_state(x=0))

    out = run_workers(job, {"a": worker, "b": worker})
    assert out == {"a": ("returned", "done"), "b": ("exit", 0)}, out
    assert "hvdrun: hvd_init: this slot was removed (fake)" in capfd.readouterr().err
    assert issubclass(WorkerRemoved, SystemExit) and WorkerRemoved("x").code == 0


def test_outside_an_elastic_job_and_for_wrong_calls_errors_are_raised_not_recovered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for is_elastic, error in ((False, HorovodInternalError("peer lost")), (True, InvalidArgumentError("bad"))):
        job = FakeJob(["a"], elastic=is_elastic).install(monkeypatch)
        rec = Recorder()

        def train(state: elastic.ObjectState) -> Any:
            rec.entries.append(1)
            raise error

        out = run_workers(job, {"a": elastic_worker(job, train, {"a": rec}, x=0)})
        assert out["a"] == ("raised", error) and rec.entries == [1] and rec.restores == 0, out
        assert job.workers["a"].inits == 1
