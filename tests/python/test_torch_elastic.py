"""hvdrun/torch/elastic/__init__.py: hvd.elastic.run with a TorchState and an
ElasticSampler through a lost worker and an added one (a simulated elastic job of worker
threads, fake_runtime.py), and the release of the old round's handles. (The names
horovod.torch.elastic serves: test_elastic_job.py.)"""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Dict, List, Tuple

import pytest

from fake_runtime import FakeJob

torch = pytest.importorskip("torch")

from hvdrun import _capi  # noqa: E402
import hvdrun.torch as hvd  # noqa: E402
from hvdrun.common.elastic import allreduce_max  # noqa: E402
from hvdrun.common.exceptions import HostsUpdatedInterrupt  # noqa: E402
from hvdrun.torch import _handles  # noqa: E402

DATA = 60
BATCH = 2
_seed_lock = threading.Lock()


def average_gradients(model: Any) -> None:
    """The step's collective (DistributedOptimizer's allreduce, by the blocking call)."""
    for p in model.parameters():
        _capi.allreduce(p.grad.data_ptr(), p.grad.data_ptr(), p.grad.numel(), _capi.FLOAT32, _capi.OP_SUM)
        p.grad.div_(hvd.size())


class Trainer:
    """A worker's training: two epochs over an ElasticSampler, a commit per batch."""

    def __init__(self, job: FakeJob, events: Dict[Tuple[int, int, int], Any]) -> None:
        self.job = job
        self.events = events  # (epoch, batch, size) -> what rank 0 (or the worker) does there
        self.committed: Dict[str, List[Tuple[int, List[int]]]] = {}
        self.resets: Dict[str, List[Tuple[int, int, int]]] = {}

    def commit(self, state: Any, pending: List[Tuple[int, List[int]]]) -> None:
        wid = self.job.local.wid
        try:
            state.commit()
        except HostsUpdatedInterrupt:
            self.committed[wid] += pending  # saved before the interrupt
            raise
        self.committed[wid] += pending
        pending.clear()

    def train(self, state: Any) -> Any:
        pending: List[Tuple[int, List[int]]] = []  # processed, not yet committed
        while state.epoch < 2:
            indices = list(state.sampler)  # what is left of the epoch, this rank's part
            start = state.batch
            for j in range(start, start + (len(indices) + BATCH - 1) // BATCH):
                event = self.events.get((state.epoch, j, hvd.size()))
                if event:
                    event(self.job, hvd.rank())
                chunk = indices[(j - start) * BATCH:(j - start + 1) * BATCH]
                state.optimizer.zero_grad()
                state.model(torch.tensor(chunk, dtype=torch.float32).reshape(-1, 1)).pow(2).sum().backward()
                average_gradients(state.model)
                state.optimizer.step()
                pending.append((state.epoch, chunk))
                state.sampler.record_batch(j, BATCH)
                state.batch = j + 1
                self.commit(state, pending)
            state.epoch, state.batch = state.epoch + 1, 0
            state.sampler.set_epoch(state.epoch)
            self.commit(state, pending)
        return [p.detach().clone() for p in state.model.parameters()]

    def worker(self) -> Any:
        wid = self.job.local.wid
        self.committed[wid], self.resets[wid] = [], []
        _capi.init()
        with _seed_lock:
            torch.manual_seed(ord(wid))  # every worker starts from other weights
            model = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.5)
        sampler = hvd.elastic.ElasticSampler(list(range(DATA)), seed=3)
        state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, batch=0)
        state.register_reset_callbacks([lambda: self.resets[wid].append((state.epoch, state.batch, hvd.size()))])
        return hvd.elastic.run(self.train)(state)


def kill_c(job: FakeJob, rank: int) -> None:
    if job.local.wid == "c":
        job.kill()


def add_d(trainer: "Trainer") -> Any:
    def event(job: FakeJob, rank: int) -> None:
        if rank == 0:
            job.notify(_capi.HOSTS_ADDED, ["a", "b", "d"])
            job.spawn("d", trainer.worker)
    return event


def test_training_goes_on_through_a_lost_and_an_added_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a", "b", "c"]).install(monkeypatch)
    trainer = Trainer(job, {})
    # c dies in epoch 0's batch 3 (after 3 commits); d is announced in epoch 1 at batch 2
    trainer.events = {(0, 3, 3): kill_c, (1, 2, 2): add_d(trainer)}
    for w in "abc":
        job.spawn(w, trainer.worker)
    out = job.join()
    assert {w: o[0] for w, o in out.items()} == {"a": "returned", "b": "returned", "c": "killed",
                                                 "d": "returned"}, out
    # every rank ends with the same parameters
    assert all(torch.equal(x, y) for w in "bd" for x, y in zip(out["a"][1], out[w][1]))
    # the restore went back to the commit after batch 2 (batch 3 next); the second reset kept
    # batch 2's commit (the interrupt came at it); the new worker never reset
    assert trainer.resets == {"a": [(0, 3, 2), (1, 3, 3)], "b": [(0, 3, 2), (1, 3, 3)], "c": [], "d": []}
    # every index once per epoch, in the batches that were committed
    for epoch in range(2):
        seen = Counter(i for w in "abcd" for e, chunk in trainer.committed[w] if e == epoch for i in chunk)
        assert seen == Counter(range(DATA)), (epoch, seen - Counter(range(DATA)), Counter(range(DATA)) - seen)
    # after the failure (no new worker) the sync moved nothing: no broadcast in round 2
    assert [c for c in job.collectives("a", "broadcast", round_=2)] == []
    assert len(job.collectives("d", "broadcast", round_=3)) > 0


def test_a_reset_releases_the_old_rounds_handles_and_restarts_unnamed_names(monkeypatch: pytest.MonkeyPatch) -> None:
    job = FakeJob(["a"]).install(monkeypatch)
    seen: List[Tuple[int, str]] = []

    def train(state: Any) -> Any:
        name = _handles._op_name("broadcast", None)
        hvd.broadcast_async_(torch.zeros(3), 0)  # never synchronized
        seen.append((len(_handles._pending), name))
        if state.tries == 0:
            state.tries = 1
            state.commit()
            job.fail_round()
            allreduce_max([0])  # fails: the round is being reset
        return len(_handles._pending)

    def worker() -> Any:
        _capi.init()
        return hvd.elastic.run(train)(hvd.elastic.TorchState(tries=0))

    _handles.release_all()
    job.spawn("a", worker)
    out = job.join()
    assert out == {"a": ("returned", 1)}, out
    assert seen == [(1, "broadcast.noname.0"), (1, "broadcast.noname.0")], seen
