"""ElasticSampler (horovod/torch/elastic/sampler.py): a dataset split across the ranks of
each round, the indices already processed this epoch left out after every reset."""

from __future__ import annotations

import math
import random
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch.utils.data

from hvdrun._basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a dataset across ranks and repartitions after reset events.

    As DistributedSampler, and it records which indices have been processed: tracked by
    a TorchState, the indices not yet processed this epoch are split among the ranks of
    the next round. Use it as Horovod's:

    1. Include this object in the TorchState.
    2. Call `record_batch` after processing a batch.
    3. Call `set_epoch` at the end of each epoch to clear the processed indices.

    Rank r of n takes positions r, r+n, r+2n, ... of the not yet processed indices (padded
    with the first of them to a multiple of n, so that every rank takes as many): after b
    batches of size s on every rank, the first b*s*n are processed, whatever the rank.
    Across resets every index is processed once per epoch, but for that padding, at most
    n-1 repeats in the epoch's last round. Unlike Horovod's, the sampler is also
    repartitioned after a reset in which the state is not synced (hosts only removed).

    Args:
        dataset: the dataset (of constant size).
        shuffle: shuffle the indices (default True), the same way on every rank.
        seed: the shuffle's seed, the same on every rank (default 0).
    """

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed

        self.epoch = 0
        self.processed_indices: set = set()

        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices: List[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.processed_num = 0
        self._order: Optional[Tuple[Tuple[int, bool, int], List[int]]] = None

        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch (the shuffle's order) and clears the processed indices. Call it at
        the end of an epoch, not at its start: a partly processed epoch must not start over."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Records that every rank has processed one more batch of `batch_size` samples."""
        self.processed_num += batch_size * self.num_replicas

    def load_state_dict(self, state_dict: Dict[str, int]) -> None:
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self) -> Dict[str, int]:
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def _epoch_order(self) -> List[int]:
        """Every index of the dataset in this epoch's order (kept until the epoch changes:
        a reset does not shuffle again)."""
        key = (len(self.dataset), self.shuffle, self.seed + self.epoch)
        if self._order is None or self._order[0] != key:
            indices = list(range(len(self.dataset)))
            if self.shuffle:
                random.Random(self.seed + self.epoch).shuffle(indices)
            self._order = (key, indices)
        return self._order[1]

    def reset(self) -> None:
        """Splits the indices not yet processed this epoch among the current ranks."""
        self.num_replicas = size()
        self.rank = rank()
        self.remaining_indices = self._epoch_order()[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) * 1.0 / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        self.indices = self.remaining_indices[:]
        # padded with the first indices to a multiple of num_replicas (repeated, where fewer
        # remain than ranks: Horovod's fails its assertion there)
        pad = self.total_size - len(self.indices)
        if pad > 0:
            self.indices += (self.indices * math.ceil(pad / len(self.indices)))[:pad]
        assert len(self.indices) == self.total_size
        self.indices = self.indices[self.rank:self.total_size:self.num_replicas]
        assert len(self.indices) == self.num_samples
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples
