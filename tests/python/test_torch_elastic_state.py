"""hvdrun/torch/elastic/state.py and _tree.py: TorchState's commit, restore and the
digest-based sync, on a simulated elastic job of worker threads (fake_runtime.py)."""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List

import pytest

from fake_runtime import FakeJob, run_workers

torch = pytest.importorskip("torch")

from hvdrun import _capi  # noqa: E402
from hvdrun.torch.elastic import TorchState, ElasticSampler, _tree, state as state_mod  # noqa: E402


_seed_lock = threading.Lock()


def make(seed: int, momentum: bool = True) -> Any:
    with _seed_lock:  # (the workers are threads: torch's one generator)
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9 if momentum else 0.0)
    return model, opt


def step(model: Any, opt: Any, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    opt.zero_grad()
    model(torch.randn(5, 4, generator=g)).pow(2).sum().backward()
    opt.step()


def flat(model: Any, opt: Any) -> List[Any]:
    sk, ts = _tree.flatten(opt.state_dict())
    return [t.clone() for t in model.state_dict().values()] + [t.clone() for t in ts]


def equal(a: List[Any], b: List[Any]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture
def job1(monkeypatch: pytest.MonkeyPatch) -> FakeJob:
    job = FakeJob(["a"]).install(monkeypatch)
    return job


def on_workers(job: FakeJob, fn: Callable[[], Any], wids: str) -> Dict[str, Any]:
    def worker() -> Any:
        _capi.init()
        return fn()
    out = run_workers(job, {w: worker for w in wids})
    for w, o in out.items():
        if o[0] == "raised":
            raise o[1]
    return {w: o[1] for w, o in out.items()}


# --- _tree ---------------------------------------------------------------------------------------
def test_digests_tell_any_changed_word_and_match_equal_bytes() -> None:
    x = torch.randn(3_000_001)  # several chunks and a tail
    y = x.clone()
    y[2_500_000] += 1.0
    z = x.clone()
    z[0], z[1] = x[1], x[0]  # the same words in another order
    d = _tree.digests([x, x.clone(), y, z, x.view(torch.int32), torch.tensor(True), torch.zeros(0),
                       torch.arange(6).reshape(2, 3).t()])
    assert d[0] == d[1] == d[4] and len({d[0], d[2], d[3]}) == 3, d
    assert d[7] == _tree.digests([torch.arange(6).reshape(2, 3).t().contiguous()])[0]
    assert all(0 <= v < 1 << 62 for v in d)


def test_flatten_unflatten_round_trip_shares_nothing_mutable() -> None:
    model, opt = make(0)
    step(model, opt, 1)
    sd = opt.state_dict()
    sk, ts = _tree.flatten(sd)
    back = _tree.unflatten(sk, ts)
    assert back["param_groups"] == sd["param_groups"] and back["param_groups"][0] is not sk["param_groups"][0]
    assert all(torch.equal(back["state"][k]["momentum_buffer"], sd["state"][k]["momentum_buffer"])
               for k in sd["state"])
    msk, _ = _tree.flatten(model.state_dict())
    assert msk._metadata == model.state_dict()._metadata  # a module's versions kept


# --- commit and restore --------------------------------------------------------------------------
def test_restore_gives_the_commit_back_again_and_again(job1: FakeJob) -> None:
    def fn() -> None:
        model, opt = make(0)
        st = TorchState(model, opt, batch=0)
        step(model, opt, 1)
        st.batch = 1
        st.commit()
        committed = flat(model, opt)
        for k in range(2):  # torch 2 keeps the tensors load_state_dict is given: a second
            step(model, opt, 2 + k)  # restore after more steps must still give the commit
            st.batch = 7
            assert not equal(flat(model, opt), committed)
            st.restore()
            assert equal(flat(model, opt), committed) and st.batch == 1

    on_workers(job1, fn, "a")


def test_a_commit_copies_into_the_previous_commits_tensors(job1: FakeJob) -> None:
    def fn() -> None:
        model, opt = make(0)
        st = TorchState(model, opt)
        step(model, opt, 1)
        st.commit()
        handlers = st._handlers.values()
        ptrs = [[t.data_ptr() for t in h._saved] for h in handlers]
        step(model, opt, 2)
        st.commit()
        assert [[t.data_ptr() for t in h._saved] for h in handlers] == ptrs
        step(model, opt, 3)
        committed = flat(model, opt)
        st.commit()
        step(model, opt, 4)
        st.restore()
        assert equal(flat(model, opt), committed)

    on_workers(job1, fn, "a")


def test_assigning_a_handled_attribute_saves_it(job1: FakeJob) -> None:
    def fn() -> None:
        model, opt = make(0)
        other, _ = make(5)
        st = TorchState(model, opt)
        st.model = other
        with torch.no_grad():
            other[0].weight.add_(1.0)
        st.restore()
        assert torch.equal(other[0].weight, make(5)[0][0].weight) and st.model is other

    on_workers(job1, fn, "a")


# --- sync --------------------------------------------------------------------------------------
def broadcasts(job: FakeJob, wid: str) -> List[int]:
    """Elements of each broadcast worker `wid` made (its tensors and objects sent)."""
    return [n for _, kind, n in job.collectives(wid) if kind == "broadcast"]


def test_sync_with_every_rank_equal_is_one_allreduce_and_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a", "b", "c"]).install(monkeypatch)

    def fn() -> int:
        model, opt = make(0)
        step(model, opt, 1)
        sampler = ElasticSampler(list(range(30)))
        st = TorchState(model, opt, sampler=sampler, epoch=3)
        st.sync()
        return len(job.collectives(job.local.wid))

    out = on_workers(job, fn, "abc")
    assert out == {"a": 1, "b": 1, "c": 1}
    assert all(broadcasts(job, w) == [] for w in "abc")


def test_sync_sends_only_the_tensor_that_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a", "b", "c"]).install(monkeypatch)

    def fn() -> List[Any]:
        model, opt = make(0)
        step(model, opt, 1)
        if job.local.wid == "c":
            with torch.no_grad():
                model[2].bias.add_(1.0)  # 2 elements
        TorchState(model, opt, epoch=3).sync()
        return flat(model, opt)

    out = on_workers(job, fn, "abc")
    assert equal(out["a"], out["b"]) and equal(out["a"], out["c"])
    for w in "abc":  # the digests, per tensor digests of the model, one tensor of 2 elements
        assert broadcasts(job, w) == [2], job.collectives(w)
        assert [k for _, k, _ in job.collectives(w)] == ["allreduce", "allreduce", "broadcast"]


def test_a_new_worker_gets_every_tensor_and_the_optimizer_state(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a", "b"]).install(monkeypatch)

    def fn() -> List[Any]:
        if job.local.wid == "a":
            model, opt = make(0)
            step(model, opt, 1)  # momentum buffers exist
            st = TorchState(model, opt, epoch=4)
        else:  # a worker that just started: other weights, no optimizer state, epoch 0
            model, opt = make(9)
            st = TorchState(model, opt, epoch=0)
        st.sync()
        return flat(model, opt) + [st.epoch]

    out = on_workers(job, fn, "ab")
    assert equal(out["a"][:-1], out["b"][:-1]) and out["a"][-1] == out["b"][-1] == 4
    model_tensors = len(make(0)[0].state_dict())
    assert len(broadcasts(job, "b")) >= model_tensors + 4  # every model tensor + the optimizer whole


def test_a_reset_repartitions_the_sampler_even_where_the_sync_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a", "b"]).install(monkeypatch)

    def fn() -> Any:
        sampler = ElasticSampler(list(range(20)), shuffle=False)
        st = TorchState(sampler=sampler)
        sampler.record_batch(0, 3)  # 6 processed
        st.commit()
        seen = [list(sampler)]
        if job.local.wid == "a":  # alone in the next round
            job.workers["a"].size = 1
            st.reset()  # (a reset whose sync is skipped: Horovod keeps the old partition here)
            seen.append(list(sampler))
        return seen

    out = on_workers(job, fn, "ab")
    # (as Horovod's, record_batch changes the partition only at the next reset)
    assert out == {"a": [list(range(0, 20, 2)), list(range(6, 20))], "b": [list(range(1, 20, 2))]}


def test_a_handler_of_the_programs_own_is_synced_its_way(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a", "b"]).install(monkeypatch)

    class Counter:
        def __init__(self) -> None:
            self.n = 0

    class CounterHandler(state_mod.StateHandler):
        synced = 0

        def save(self) -> None: pass
        def restore(self) -> None: pass

        def sync(self) -> None:
            CounterHandler.synced += 1

    registry = state_mod.get_handler_registry()
    monkeypatch.setattr(state_mod, "_handler_registry", registry + [(Counter, CounterHandler)])

    def fn() -> Any:
        st = TorchState(counter=Counter(), epoch=1)
        st.sync()
        return type(st._handlers["counter"]).__name__

    assert on_workers(job, fn, "ab") == {"a": "CounterHandler", "b": "CounterHandler"}
    assert CounterHandler.synced == 2
