"""hvdrun/torch/elastic/sampler.py: ElasticSampler against Horovod's algorithm, and every
index processed once per epoch across resets that change the size and the ranks."""
from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any, List, Tuple

import pytest

torch = pytest.importorskip("torch")

from hvdrun.torch.elastic import sampler as sampler_mod  # noqa: E402
from hvdrun.torch.elastic.sampler import ElasticSampler  # noqa: E402


class Ranks:
    """What rank() and size() answer for the sampler being reset."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rank, self.size = 0, 1
        monkeypatch.setattr(sampler_mod, "rank", lambda: self.rank)
        monkeypatch.setattr(sampler_mod, "size", lambda: self.size)

    def sampler(self, rank: int, size: int, *args: Any, **kwargs: Any) -> ElasticSampler:
        self.rank, self.size = rank, size
        return ElasticSampler(*args, **kwargs)

    def reset(self, s: ElasticSampler, rank: int, size: int, state: Any) -> None:
        self.rank, self.size = rank, size
        s.load_state_dict(state)


def horovod_indices(n: int, seed: int, epoch: int, processed: int, rank: int, size: int) -> List[int]:
    """Horovod 0.28.1's ElasticSampler.reset() and __iter__, as written there."""
    all_indices = list(range(n))
    random.Random(seed + epoch).shuffle(all_indices)
    remaining = all_indices[processed:]
    num_samples = int(math.ceil(len(remaining) * 1.0 / size))
    total_size = num_samples * size
    indices = remaining[:]
    indices += indices[:(total_size - len(indices))]
    return indices[rank:total_size:size]


@pytest.mark.parametrize("n,size,processed,epoch,seed", [
    (50, 3, 0, 0, 0), (50, 3, 12, 1, 0), (64, 4, 16, 2, 7), (7, 2, 0, 5, 3), (100, 7, 42, 0, 1)])
def test_the_indices_are_horovods(monkeypatch: pytest.MonkeyPatch, n: int, size: int, processed: int, epoch: int,
                                  seed: int) -> None:
    ranks = Ranks(monkeypatch)
    for r in range(size):
        s = ranks.sampler(r, size, list(range(n)), seed=seed)
        ranks.reset(s, r, size, {"epoch": epoch, "processed_num": processed})
        assert list(s) == horovod_indices(n, seed, epoch, processed, r, size)
        assert len(s) == len(list(s))


def test_fewer_indices_left_than_ranks_still_gives_every_rank_one(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = Ranks(monkeypatch)  # Horovod's fails its assertion: it pads from too short a list
    got = []
    for r in range(4):
        s = ranks.sampler(r, 4, list(range(10)), shuffle=False)
        ranks.reset(s, r, 4, {"epoch": 0, "processed_num": 9})
        got.append(list(s))
    assert got == [[9], [9], [9], [9]]


def run_epoch(ranks: Ranks, n: int, batch: int, rounds: List[Tuple[int, int, bool]], epoch: int) -> Tuple[Counter, int]:
    """One epoch over rounds of (size, batches to run, fails after one more uncommitted
    batch); the last round runs to the end. Commits after every batch; a failure drops
    what was processed since the commit. Returns the committed count of each index and
    the padding of the last round."""
    committed: Counter = Counter()
    state = {"epoch": epoch, "processed_num": 0}
    pad = 0
    for k, (size, batches, fails) in enumerate(rounds):
        last = k == len(rounds) - 1
        samplers = [ranks.sampler(r, size, list(range(n)), seed=11) for r in range(size)]
        for r, s in enumerate(samplers):
            ranks.reset(s, r, size, state)
        pad = samplers[0].total_size - len(samplers[0].remaining_indices)
        lists = [list(s) for s in samplers]
        todo = math.ceil(len(lists[0]) / batch) if last else batches
        for j in range(todo):
            for r, s in enumerate(samplers):
                committed.update(lists[r][j * batch:(j + 1) * batch])
                s.record_batch(j, batch)
            state = samplers[0].state_dict()  # commit (every rank holds the same)
        if fails and not last:
            for s in samplers:  # processed, then lost: the restore goes back to the commit
                s.record_batch(todo, batch)
    return committed, pad


@pytest.mark.parametrize("rounds", [
    [(3, 2, False), (2, 1, True), (4, 1, False), (1, 0, False)],
    [(4, 1, True), (4, 2, False), (3, 0, False)],
    [(1, 3, False), (5, 0, False)],
])
def test_every_index_once_per_epoch_across_resets(monkeypatch: pytest.MonkeyPatch, rounds: Any) -> None:
    ranks = Ranks(monkeypatch)
    for epoch in range(2):
        committed, pad = run_epoch(ranks, 103, 4, rounds, epoch)
        assert set(committed) == set(range(103)), sorted(set(range(103)) - set(committed))
        repeats = sum(committed.values()) - 103
        assert repeats == pad < rounds[-1][0], (repeats, pad)


def test_a_reset_does_not_shuffle_again_and_set_epoch_does(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = Ranks(monkeypatch)
    s = ranks.sampler(0, 1, list(range(1000)), seed=4)
    shuffles = []
    monkeypatch.setattr(sampler_mod.random.Random, "shuffle", lambda self, x: shuffles.append(1))
    for _ in range(3):
        ranks.reset(s, 0, 1, {"epoch": 0, "processed_num": 10})
    assert shuffles == []
    s.set_epoch(1)
    assert shuffles == [1] and s.processed_num == 0
