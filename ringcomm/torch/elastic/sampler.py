"""ElasticSampler (Horovod's): shards a dataset over the ranks of the moment, and after a reset
reshards what the epoch has not processed yet over the new ranks."""

from __future__ import annotations

import math
import random

import torch.utils.data

from ringcomm.torch import state as job


class ElasticSampler(torch.utils.data.Sampler):
    """Like ``DistributedSampler``, with a record of what was processed this epoch. Tracked by
    a ``TorchState``, it is committed, restored and synchronized with the rest, and a reset
    spreads the samples not processed yet over the new set of ranks.

    Use: put it in the TorchState; after each batch call ``record_batch(batch_idx,
    batch_size)`` (every rank processed ``batch_size`` samples: Horovod 0.28's way) or
    ``record_indices(indices)`` (the indices this rank processed: Horovod's earlier way); call
    ``set_epoch(epoch)`` at the end of each epoch (not at the start: that would forget what a
    partly finished epoch processed).

    ``dataset``: of constant size. ``shuffle``: a permutation per epoch, seeded with
    ``seed + epoch`` (the same seed on every rank).
    """

    def __init__(self, dataset, shuffle: bool = True, seed: int = 0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # leading samples of the epoch's order processed on every rank
        self.processed_indices: set = set()  # indices recorded one by one
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices: list = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch``: a new order (when shuffling), and nothing processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Every rank processed ``batch_size`` more samples (``batch_idx`` is not used)."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices) -> None:
        """This rank processed ``indices`` (dataset indices). Synchronizing the state takes the
        union over the ranks."""
        self.processed_indices.update(int(i) for i in indices)

    def state_dict(self) -> dict:
        """The epoch and the indices processed in it, for a checkpoint or an elastic state."""
        return dict(
            epoch=self.epoch,
            processed_num=self.processed_num,
            processed_indices=set(self.processed_indices),
        )

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores what :meth:`state_dict` returned, then reshards what is left of the epoch
        over the current ranks."""
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.processed_indices = set(state_dict.get("processed_indices", ()))
        self.reset()

    def reset(self) -> None:
        """Shards what this epoch has not processed over the current ranks."""
        self.num_replicas = job.size()
        self.rank = job.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = [
            i for i in order[self.processed_num :] if i not in self.processed_indices
        ]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        # Repeat the first ones so that every rank gets as many.
        indices += indices[: self.total_size - len(indices)]
        self.indices = indices[self.rank : self.total_size : self.num_replicas]
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples
