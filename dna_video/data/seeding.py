"""An explicit random stream for the training data: order and augmentation from ``data_seed``.

Without it the shuffling (the DataLoader's default sampler), the clip positions and the
torchvision v2 augmentation all draw from torch's global generator, which building a model
consumes: two models built differently (softmax and DnA at the same seed) then see different
data. With a ``data_seed``, :class:`SeededSampler` draws each epoch's order from
(data_seed, epoch) and hands the dataset, with every index, an item seed derived from
(data_seed, epoch, index) alone (:func:`item_seed`); :class:`~.dataset.VideoClipDataset` draws
its frame indices from that seed and runs the transform under :func:`torch_draws_from`. So the
batches of an epoch are a function of (data_seed, epoch), whatever the global generator, the
number of workers or which worker loads an item.

Lightning calls ``set_epoch(epoch)`` on the sampler at the start of every training epoch (its
fit loop, also after a resume), as it does for PyTorch's ``DistributedSampler``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import DistributedSampler

__all__ = ["SeededItem", "SeededSampler", "item_seed", "epoch_order", "torch_draws_from"]


class SeededItem(NamedTuple):
    """What :class:`SeededSampler` hands the dataset: the record's position in the split and
    the seed of every random draw made to load it."""

    index: int
    seed: int


def item_seed(data_seed: int, epoch: int, index: int) -> int:
    """The seed of item ``index`` in ``epoch``: a function of these three numbers only."""
    return int(np.random.SeedSequence([data_seed, epoch, index]).generate_state(1, np.uint64)[0])


def epoch_order(data_seed: int, epoch: int, num_items: int) -> np.ndarray:
    """The order of ``num_items`` items in ``epoch``: a permutation drawn from (data_seed, epoch)."""
    return np.random.default_rng([data_seed, epoch]).permutation(num_items)


@contextmanager
def torch_draws_from(seed: int):
    """Inside, torch's global CPU generator starts at ``seed`` (torchvision v2 transforms draw
    from it); outside, its state is as before (:func:`torch.random.fork_rng`)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class SeededSampler(DistributedSampler):
    """Training order and item seeds from (``data_seed``, epoch): yields :class:`SeededItem`.

    A :class:`~torch.utils.data.DistributedSampler` so that Lightning keeps it as it is under
    DDP (it would otherwise wrap it in its own) and calls :meth:`set_epoch`: every process draws
    the same order and takes positions ``rank::num_replicas``, the order padded with its first
    items to a multiple of ``num_replicas`` (as PyTorch's). One process: ``num_replicas=1``.

    Args:
        dataset: what is sampled (only its length is used).
        data_seed: the seed of the order and of every item's draws (0 or more).
        num_replicas: processes sharing the epoch.
        rank: this process's place among them.
    """

    def __init__(self, dataset: Sized, data_seed: int, num_replicas: int = 1, rank: int = 0) -> None:
        if data_seed < 0:
            raise ValueError(f"data_seed is {data_seed}: give 0 or more")
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=data_seed,
                         drop_last=False)
        self.data_seed = data_seed

    def __iter__(self) -> Iterator[SeededItem]:
        order = epoch_order(self.data_seed, self.epoch, len(self.dataset)).tolist()
        # Pad to total_size by repeating the order's start (PyTorch's DistributedSampler does the same).
        padding = self.total_size - len(order)
        order += (order * (padding // max(len(order), 1) + 1))[:padding]
        for index in order[self.rank: self.total_size: self.num_replicas]:
            yield SeededItem(index, item_seed(self.data_seed, self.epoch, index))
