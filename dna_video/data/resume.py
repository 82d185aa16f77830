"""The training loader's place in its epoch, saved in every checkpoint and taken up on resume.

A run killed in the middle of an epoch and resumed with ``--ckpt_path last`` goes on with the
videos of that epoch it had not trained on, in the same order, rather than starting the epoch
over (which trains twice on its first part and never on the rest, when runs are killed at a
regular time: every epoch of an NTU run on a cluster with a time limit).

How: Lightning (2.6) saves ``state_dict()`` of a training loader that has one and, when it
resumes, calls ``load_state_dict()`` before it asks the loader for batches again (its
"stateful dataloader" support, as for ``torchdata``'s ``StatefulDataLoader``, which is not
installed here). :class:`ResumableDataLoader` counts the batches it has handed over in the
current epoch; its state is that count with the epoch, the epoch's order seed and what the
order depends on. :class:`EpochSampler` draws each epoch's order and, after a resume, skips
this process's first ``batches x batch_size`` videos of the epoch it was saved in.

* The order is the same with any number of DataLoader workers (batches are handed over in
  order), so ``num_workers`` may change between the two runs: one line says so. With
  ``data_seed`` every video's random draws (clip, crop, flip) depend on (data_seed, epoch,
  video) alone, so the rest of the epoch is exactly the uninterrupted run's; without it the
  order is the same and the draws are new.
* The number of processes, the batch size, the split (its size, and its file names and
  labels by a digest) and ``data_seed`` decide which videos a process's next batch holds:
  resuming in the middle of an epoch with any of them changed stops with an error saying
  what changed and what to do (no silent reshuffle).
  A checkpoint written at the end of an epoch resumes with any of them changed.

The sampler draws the order when the loader hands over its first batch, after Lightning has
set the epoch: a loader with workers otherwise draws it when Lightning creates the iterator,
before it sets the epoch of a resumed run (Lightning issue #21938, open in 2.6), and the first
resumed epoch would take epoch 0's order.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from dna_video.data.seeding import SeededItem, epoch_order, item_seed

log = logging.getLogger(__name__)

__all__ = ["EpochSampler", "ResumableDataLoader", "ResumeMismatchError"]


class ResumeMismatchError(ValueError):
    """A checkpoint written in the middle of an epoch cannot go on with this run's data
    settings (another number of processes, batch size, split or data seed)."""


class EpochSampler(DistributedSampler):
    """Each training epoch's order over ``dataset``, this process's share of it, resumable in
    the epoch.

    The order is, with ``data_seed``: a permutation drawn from (data_seed, epoch), every index
    handed over as a :class:`~.seeding.SeededItem` (the same as
    :class:`~.seeding.SeededSampler`); without it, in one process: a permutation drawn from a
    seed taken from torch's global generator when the epoch starts (the same draws as
    PyTorch's ``RandomSampler``); without it, over several processes: a permutation drawn from
    (``seed`` + epoch) (the same as the ``DistributedSampler`` Lightning would put in). Several
    processes take positions ``rank::num_replicas`` of the order, padded with its first indices
    to a multiple of ``num_replicas``.

    Args:
        dataset: what is sampled (only its length is used).
        data_seed: the seed of the order and of every item's draws; None: see above.
        num_replicas: processes sharing the epoch.
        rank: this process's place among them.
        seed: the base seed of the order over several processes without ``data_seed``.
    """

    def __init__(self, dataset: Sized, data_seed: int | None = None, num_replicas: int = 1, rank: int = 0,
                 seed: int = 0) -> None:
        if data_seed is not None and data_seed < 0:
            raise ValueError(f"data_seed is {data_seed}: give 0 or more")
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)
        self.data_seed = data_seed
        self.epoch_seed: int | None = None  # the seed the current epoch's order was drawn from
        self._skip: tuple[int, int, int | None] | None = None  # (epoch, items to skip, its epoch seed)

    def resume(self, epoch: int, skip: int, epoch_seed: int | None) -> None:
        """The next iteration over ``epoch`` leaves out this process's first ``skip`` items and
        draws the order from ``epoch_seed`` (as the run that was saved did)."""
        self._skip = (epoch, skip, epoch_seed)

    def _order(self, epoch_seed: int | None) -> list[int]:
        n = len(self.dataset)
        if self.data_seed is not None:
            return epoch_order(self.data_seed, self.epoch, n).tolist()
        if epoch_seed is None:  # a new epoch, not a resumed one
            # several processes: as Lightning's DistributedSampler; one: as RandomSampler draws it
            epoch_seed = (self.seed + self.epoch if self.num_replicas > 1
                          else int(torch.empty((), dtype=torch.int64).random_().item()))
        self.epoch_seed = epoch_seed
        generator = torch.Generator()
        generator.manual_seed(epoch_seed)
        return torch.randperm(n, generator=generator).tolist()

    def __iter__(self) -> Iterator[int | SeededItem]:
        skip, epoch_seed = 0, None
        if self._skip is not None and self._skip[0] == self.epoch:
            _, skip, epoch_seed = self._skip
        self._skip = None
        order = self._order(epoch_seed)
        padding = self.total_size - len(order)
        order += (order * (padding // max(len(order), 1) + 1))[:padding]
        mine = order[self.rank: self.total_size: self.num_replicas][skip:]
        if self.data_seed is None:
            yield from mine
            return
        for index in mine:
            yield SeededItem(index, item_seed(self.data_seed, self.epoch, index))


class _Counted:
    """The loader's iterator: creates the DataLoader's own on the first ``next`` (after
    Lightning set the epoch) and counts the batches handed over."""

    def __init__(self, loader: "ResumableDataLoader") -> None:
        self.loader = loader
        self.base: Iterator | None = None

    def __iter__(self) -> "_Counted":
        return self

    def __len__(self) -> int:
        return len(self.loader)

    def __next__(self) -> Any:
        if self.base is None:
            self.loader._start_epoch()
            self.base = DataLoader.__iter__(self.loader)
        batch = next(self.base)
        self.loader._batches += 1
        return batch


class ResumableDataLoader(DataLoader):
    """A training DataLoader over an :class:`EpochSampler` whose place in the epoch goes into
    checkpoints (``state_dict``, ``load_state_dict``: Lightning calls them) and is taken up
    on resume. Takes every DataLoader argument; ``sampler`` must be an :class:`EpochSampler`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.sampler, EpochSampler):
            raise TypeError(f"ResumableDataLoader needs an EpochSampler, got {type(self.sampler).__name__}")
        self._batches = 0  # handed over in the current epoch
        self._pending: dict[str, Any] | None = None  # a loaded state, applied when the next epoch starts

    def __iter__(self) -> _Counted:
        return _Counted(self)

    def _settings(self) -> dict[str, Any]:
        sampler: EpochSampler = self.sampler
        records = getattr(sampler.dataset, "records", None)  # a VideoClipDataset's RecordTable
        return {"num_replicas": sampler.num_replicas, "batch_size": self.batch_size,
                "videos": len(sampler.dataset), "data_seed": sampler.data_seed,
                "split": records.digest() if hasattr(records, "digest") else None}

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch is: its number, the batches handed over, the seed of its order and
        the settings that decide the order (plus the workers, for the log). A state loaded and
        not yet taken up (a checkpoint written before the resumed run's first batch, e.g. on
        SIGTERM) is still where the epoch is: it is returned as loaded."""
        if self._pending is not None:
            return dict(self._pending)
        sampler: EpochSampler = self.sampler
        return {"epoch": sampler.epoch, "batches": self._batches, "epoch_seed": sampler.epoch_seed,
                "num_workers": self.num_workers, **self._settings()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take up ``state`` when the next epoch starts, if it is the epoch it was saved in."""
        self._pending = dict(state)

    def _start_epoch(self) -> None:
        sampler: EpochSampler = self.sampler
        state, self._pending = self._pending, None
        self._batches = 0
        if state is None or state.get("epoch") != sampler.epoch or not state.get("batches"):
            return  # a new epoch (the saved one was finished), or nothing of it done yet
        done = int(state["batches"])
        if done >= len(self):  # the saved epoch was finished: nothing of it left
            sampler.resume(sampler.epoch, len(sampler), state.get("epoch_seed"))
            self._batches = done
            return
        changed = {key: (state.get(key), now) for key, now in self._settings().items() if state.get(key) != now}
        if changed:
            what = "; ".join(f"{_SETTING_NAMES[key]} {was} then, {now} now" for key, (was, now) in changed.items())
            raise ResumeMismatchError(
                f"the checkpoint was written in the middle of epoch {sampler.epoch}, after {done} batches, and this "
                f"run cannot go on with the rest of that epoch's videos in their order: {what}. Resume with the "
                "settings of the run that wrote it (the number of processes is trainer.devices x trainer.num_nodes), "
                "or from a checkpoint written at the end of an epoch (docs/reliability.md, 'Resume inside an epoch')"
            )
        if state.get("num_workers") != self.num_workers:
            log.info("resuming epoch %d with %d DataLoader workers instead of %s: the order of the videos does not "
                     "depend on them", sampler.epoch, self.num_workers, state.get("num_workers"))
        sampler.resume(sampler.epoch, done * self.batch_size, state.get("epoch_seed"))
        self._batches = done
        log.info("resuming epoch %d after %d of its %d batches: the rest of its videos, in their order",
                 sampler.epoch, done, len(self))


_SETTING_NAMES = {"num_replicas": "processes", "batch_size": "data.init_args.batch_size",
                  "videos": "training videos", "data_seed": "data.init_args.data_seed",
                  "split": "the training split's file names and labels (digest)"}


def default_seed() -> int:
    """The base seed Lightning gives the distributed sampler it would put in (the run's seed)."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))
