"""Base LightningDataModule for video classification: splits -> datasets -> loaders.

A concrete DataModule says which classes it has (:attr:`class_names`) and which videos make
each split (:meth:`build_split`); this base owns sampling, transforms and loading, so every
dataset (synthetic, Toyota Smarthome, NTU RGB+D, list files) goes through the same path.
It also checks at setup that every video of a split exists, and logs per split what it
holds and what was left out.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from torch.utils.data import DataLoader, Sampler

from dna_video.data.dataset import VideoClipDataset, VideoRecord, collate_videos
from dna_video.data.decoders import resolve_decoder
from dna_video.data.eval_settings import EvalSettings
from dna_video.data.protocols import Protocol
from dna_video.data.sampling import FrameSampler
from dna_video.data.seeding import SeededSampler
from dna_video.data.transforms import EvalClipTransform, TrainClipTransform

log = logging.getLogger(__name__)

__all__ = ["VideoDataModule", "Catalog", "SplitRecords", "SplitSummary"]

SPLITS = ("train", "val", "test")
# The clip and test-view defaults are EvalSettings' (stated once): a checkpoint or config that
# leaves one out is read as this DataModule would have made it, without importing this module.
_EVAL = EvalSettings()


@dataclass
class SplitRecords:
    """What :meth:`VideoDataModule.build_split` found: the split's videos and the files left
    out of it, by reason (reason -> paths), so that nothing is dropped without a count."""

    records: list[VideoRecord]
    excluded: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SplitSummary:
    """What a split holds after setup (also logged): videos, videos per label, files left
    out by reason, and missing files (skipped with ``skip_missing``)."""

    videos: int
    class_counts: dict[int, int]
    excluded: dict[str, int]
    missing: tuple[str, ...]


class Catalog:
    """Every file found under a dataset root, sorted into splits or left out with a reason.

    Reasons in ``strict_reasons`` (a malformed name, an unknown activity...) are errors in
    strict mode; the others (a class outside the protocol, a camera the protocol does not
    use) are part of the protocol and only counted. ``foreign_reasons`` mark files that are
    not videos of the dataset at all (another file type, a malformed name).
    """

    def __init__(self, name: str, strict_reasons: Sequence[str] = (), foreign_reasons: Sequence[str] = ()) -> None:
        self.name = name
        self.strict_reasons = tuple(strict_reasons)
        self.foreign_reasons = tuple(foreign_reasons)
        self.records: dict[str, list[VideoRecord]] = {}
        # split (None: the file belongs to no split) -> reason -> paths
        self.excluded: dict[str | None, dict[str, list[str]]] = {}
        self.notes: list[str] = []  # facts about the splits, logged with the summary

    def add(self, split: str, record: VideoRecord) -> None:
        self.records.setdefault(split, []).append(record)

    def exclude(self, split: str | None, reason: str, path: str) -> None:
        self.excluded.setdefault(split, {}).setdefault(reason, []).append(path)

    def excluded_by_reason(self) -> dict[str, list[str]]:
        """Every excluded file, whatever its split, by reason (each file once)."""
        out: dict[str, dict[str, None]] = {}
        for reasons in self.excluded.values():
            for reason, paths in reasons.items():
                out.setdefault(reason, {}).update(dict.fromkeys(paths))
        return {reason: list(paths) for reason, paths in out.items()}

    def excluded_counts(self) -> dict[str, int]:
        """How many files were left out, by reason (each file once)."""
        return {reason: len(paths) for reason, paths in self.excluded_by_reason().items()}

    def split(self, split: str) -> SplitRecords:
        return SplitRecords(list(self.records.get(split, [])), dict(self.excluded.get(split, {})))

    def raise_if_strict(self, strict: bool) -> None:
        bad = {r: p for r, p in self.excluded_by_reason().items() if r in self.strict_reasons}
        if strict and bad:
            raise ValueError(
                f"{self.name}: strict mode: "
                + "; ".join(f"{len(p)} file(s) with {r}: {_examples(p)}" for r, p in bad.items())
                + ". Remove or rename them, or set strict=false to leave them out with a count."
            )

    def log_summary(self, root: str) -> None:
        total = len({r.path for records in self.records.values() for r in records})
        excluded = self.excluded_by_reason()
        text = f"{self.name}: {total} videos in splits under {root}"
        if excluded:
            text += f"; {sum(len(p) for p in excluded.values())} files left out:"
        for reason, paths in excluded.items():
            text += f"\n    {len(paths)} {reason} (e.g. {_examples(paths, 2)})"
        log.info(text)
        for note in self.notes:
            log.info("%s: %s", self.name, note)


def _examples(paths: Sequence[str], k: int = 3) -> str:
    shown = ", ".join(str(p) for p in paths[:k])
    return shown + (f" (+{len(paths) - k} more)" if len(paths) > k else "")


def _evaluation_sampler(dataset) -> Sampler | None:
    """Across several processes, every video exactly once: Lightning's default distributed
    sampler pads the last ranks with repeated videos, which would count them twice in the
    per-video metrics. None (a plain sequential order) in a single process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return UnrepeatedDistributedSampler(
        dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=False
    )


def _seeded_sampler(dataset, data_seed: int) -> SeededSampler:
    """The training sampler of ``data_seed``, over this process's share under DDP."""
    if dist.is_available() and dist.is_initialized():
        return SeededSampler(dataset, data_seed, num_replicas=dist.get_world_size(), rank=dist.get_rank())
    return SeededSampler(dataset, data_seed)


class VideoDataModule(L.LightningDataModule):
    """Clip sampling, transforms and loaders shared by every video dataset.

    The defaults are the paper's fine-tuning recipe (dna.md): batch 8, 8 frames at sampling
    rate 32 (30 fps), short side jittered in [256, 320] + random crop 224 + flip, mean/std
    0.45/0.225, evaluation on 1 clip x 3 crops of 224.

    Args:
        root: folder holding the dataset's videos.
        batch_size: clips per training batch; videos per evaluation batch.
        num_workers: DataLoader worker processes (each decodes with one thread).
        decoder: what decodes the videos: ``decord``, ``pyav`` (PyAV) or ``torchcodec`` (the
            ``torchcodec`` extra, with FFmpeg's shared libraries installed). Where decord does
            not import (no wheel for the platform), ``decord`` decodes with PyAV and one info
            line says so. All return the same frames for the same indices.
        num_frames: frames per clip (T), linked to the model's ``num_frames``.
        sampling_rate: interval between sampled frames, counted at ``target_fps``.
        target_fps: frame rate ``sampling_rate`` refers to (None: the file's own frames).
        sampling: ``clip`` (T frames ``sampling_rate`` apart) or ``uniform`` (T segments).
        short_video: ``clamp`` or ``loop`` frame indices past the end of a short video.
        train_short_side: random short side (min, max) before the training crop.
        crop_size: square input side, linked to the model's ``img_size``.
        hflip: random horizontal flips in training.
        mean: per-channel mean for normalisation (0.45 as official TimeSformer training;
            ImageNet ViT weights used 0.5).
        std: per-channel std for normalisation.
        val_num_clips: temporal views per video in validation.
        val_num_crops: spatial views per video in validation (1 centre or 3 along the long side;
            3 as in test, so that the best checkpoint is chosen on what the test measures).
        test_num_clips: temporal views per video in test and predict.
        test_num_crops: spatial views per video in test and predict (1 or 3).
        max_retries: in training, how many other videos to try when a file cannot be decoded.
        pin_memory: pin batches in page-locked memory (for GPU training).
        persistent_workers: keep workers alive between epochs.
        multiprocessing_context: ``fork``, ``spawn`` or ``forkserver`` (None: platform default).
        skip_missing: leave out videos of a split whose file does not exist (counted in the
            log) instead of stopping with an error that names them.
        timeout: seconds a worker may take to deliver a batch before the run stops with an
            error (0: wait forever). A guard against a file that hangs the decoder; only with
            ``num_workers > 0``. A decode still running after half of it is logged with the
            file's path.
        data_seed: the seed of the training data's random stream: None (default) draws the
            training order, the clip positions and the augmentation (short side, crop, flip)
            from torch's global generator, so they change with whatever consumed it before
            (building a model does). A number draws each epoch's order from (data_seed, epoch)
            and every item's draws from (data_seed, epoch, item): the batches of an epoch are
            the same whatever model is built, however many workers load them, and after a
            resume (:class:`~.seeding.SeededSampler`). Evaluation has no random draws.
        cache_decoded: decode each video of a split once, whole (every frame, uint8), when the
            split is set up, and take every clip from memory: later epochs and repeated
            evaluations decode nothing. Memory: frames x height x width x 3 bytes per video,
            per process (DataLoader workers started by ``fork`` share the parent's copy; with
            ``spawn`` each gets one); e.g. 2,000 videos of 48 frames of 48 x 64 take 0.9 GB.
            The size is logged once a split is cached. Clips equal those decoded without it.
    """

    #: What the data fixes of the model: model argument -> the attribute that holds it. The
    #: command line links each from the built DataModule (docs/configs.md, "What the data
    #: fixes"), so a config never states them twice.
    MODEL_INPUTS = {"num_classes": "num_classes", "num_frames": "num_frames", "img_size": "crop_size"}

    def __init__(
        self,
        root: str,
        batch_size: int = 8,
        num_workers: int = 8,
        decoder: Literal["decord", "pyav", "torchcodec"] = _EVAL.decoder,
        num_frames: int = _EVAL.num_frames,
        sampling_rate: int = _EVAL.sampling_rate,
        target_fps: float | None = _EVAL.target_fps,
        sampling: str = _EVAL.sampling,
        short_video: str = _EVAL.short_video,
        train_short_side: tuple[int, int] = (256, 320),
        crop_size: int = _EVAL.crop_size,
        hflip: bool = True,
        mean: Sequence[float] = _EVAL.mean,
        std: Sequence[float] = _EVAL.std,
        val_num_clips: int = 1,
        val_num_crops: int = 3,
        test_num_clips: int = _EVAL.num_clips,
        test_num_crops: int = _EVAL.num_crops,
        max_retries: int = 10,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        multiprocessing_context: str | None = None,
        skip_missing: bool = False,
        timeout: float = 0.0,
        data_seed: int | None = None,
        cache_decoded: bool = False,
    ) -> None:
        super().__init__()
        if data_seed is not None and data_seed < 0:
            raise ValueError(f"data.init_args.data_seed is {data_seed}: give 0 or more, or null (the global generator)")
        if batch_size < 1:
            raise ValueError(f"data.init_args.batch_size is {batch_size}: give 1 or more (clips per batch)")
        if num_workers < 0:
            raise ValueError(f"data.init_args.num_workers is {num_workers}: give 0 (load in the main process) or more")
        # Every argument, a subclass's too, in each checkpoint (datamodule_hyper_parameters).
        self.save_hyperparameters()
        self.root = root
        self.batch_size = batch_size
        self.num_workers = num_workers
        # The decoder that reads here (decord -> PyAV where decord does not import); one that
        # cannot run (torchcodec not installed) stops the command now, with what to do.
        self.decoder = resolve_decoder(decoder)
        self.num_frames = num_frames
        self.crop_size = crop_size
        self.sampler = FrameSampler(num_frames, sampling_rate, target_fps, sampling, short_video)
        self.train_short_side = tuple(train_short_side)
        self.hflip = hflip
        self.mean, self.std = tuple(mean), tuple(std)
        self.views = {"val": (val_num_clips, val_num_crops), "test": (test_num_clips, test_num_crops)}
        self.max_retries = max_retries
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers and num_workers > 0
        self.multiprocessing_context = multiprocessing_context if num_workers > 0 else None
        self.skip_missing = skip_missing
        self.timeout = timeout if num_workers > 0 else 0.0
        self.data_seed = data_seed
        self.cache_decoded = cache_decoded
        self.datasets: dict[str, VideoClipDataset] = {}
        self.summaries: dict[str, SplitSummary] = {}

    # -- what a concrete dataset provides -------------------------------------------------
    @property
    def class_names(self) -> list[str]:
        """Class names in label order (line i = label i)."""
        raise NotImplementedError

    def build_split(self, split: str) -> list[VideoRecord] | SplitRecords:
        """The videos of ``split`` (``train``, ``val`` or ``test``), optionally with the files
        left out of it and why (:class:`SplitRecords`)."""
        raise NotImplementedError

    @property
    def dataset_name(self) -> str:
        """How logs name this dataset (e.g. with its protocol)."""
        return type(self).__name__

    # -- shared machinery --------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def num_views(self, split: str) -> int:
        clips, crops = self.views[split]
        return clips * crops

    def make_dataset(self, split: str, records: Sequence[VideoRecord]) -> VideoClipDataset:
        if split == "train":
            transform = TrainClipTransform(self.train_short_side, self.crop_size, self.hflip, self.mean, self.std)
            return VideoClipDataset(records, self.sampler, transform, train=True, max_retries=self.max_retries,
                                    slow_decode_warning=self.timeout / 2, decoder=self.decoder,
                                    cache_decoded=self.cache_decoded)
        clips, crops = self.views[split]
        transform = EvalClipTransform(self.crop_size, crops, self.mean, self.std)
        return VideoClipDataset(records, self.sampler, transform, train=False, num_clips=clips,
                                slow_decode_warning=self.timeout / 2, decoder=self.decoder,
                                cache_decoded=self.cache_decoded)

    def check_inputs(self, stage: str) -> None:
        """Find now what would stop ``stage`` later: the command line calls this before it
        creates a run folder. Builds the splits ``stage`` reads (kept for :meth:`setup`), so a
        missing root, an empty split or missing videos stop the command before it writes."""
        self.setup(stage)

    def setup(self, stage: str | None = None) -> None:
        wanted = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}
        for split in wanted.get(stage, SPLITS) if stage else SPLITS:
            if split in self.datasets:
                continue
            records = self.checked_split(split)
            self.datasets[split] = self.make_dataset(split, records)
            if self.cache_decoded and records:
                self._fill_cache(split)

    def _fill_cache(self, split: str) -> None:
        """Decode the split's videos into memory now (``cache_decoded``) and log what it holds."""
        videos, size, failed = self.datasets[split].fill_cache()
        log.info("%s %s: %d decoded videos cached in memory (%.1f MiB)%s", self.dataset_name, split, videos,
                 size / 2**20, f"; {failed} failed to decode (handled when sampled)" if failed else "")

    def checked_split(self, split: str) -> list[VideoRecord]:
        """:meth:`build_split` with labels checked, missing files handled and the split's
        summary logged and kept in :attr:`summaries`."""
        found = self.build_split(split)
        if not isinstance(found, SplitRecords):
            found = SplitRecords(list(found))
        bad = [r for r in found.records if not 0 <= r.label < self.num_classes]
        if bad:
            raise ValueError(
                f"{self.dataset_name} {split}: {len(bad)} labels outside [0, {self.num_classes}), "
                f"e.g. {bad[0].path} -> {bad[0].label}"
            )
        missing = [r.path for r in found.records if not os.path.isfile(r.path)]
        if missing and not self.skip_missing:
            raise FileNotFoundError(
                f"{self.dataset_name} {split}: {len(missing)} of {len(found.records)} videos are missing: "
                f"{_examples(missing)}. Check the dataset root ({self.root}), or set "
                "data.init_args.skip_missing=true to leave them out (they are counted in the log)."
            )
        lost = set(missing)
        records = [r for r in found.records if r.path not in lost]
        counts = Counter(r.label for r in records)
        summary = SplitSummary(
            videos=len(records),
            class_counts=dict(sorted(counts.items())),
            excluded={reason: len(paths) for reason, paths in found.excluded.items() if paths},
            missing=tuple(missing),
        )
        self.summaries[split] = summary
        absent = [self.class_names[i] for i in range(self.num_classes) if i not in counts]
        text = f"{self.dataset_name} {split}: {len(records)} videos, {len(counts)}/{self.num_classes} classes present"
        if absent and len(absent) <= 5:
            text += f" (absent: {', '.join(absent)})"
        excluded = sum(summary.excluded.values())
        text += f"; excluded {excluded}"
        if excluded:
            text += " (" + "; ".join(f"{reason}: {n}" for reason, n in summary.excluded.items()) + ")"
        text += f"; missing {len(missing)}" + (f" (skipped: {_examples(missing)})" if missing else "")
        log.info(text)
        if not records and split == "val":
            # A dataset may have no validation split (e.g. NTU with val_fraction 0): fit runs without.
            log.warning("%s %s: the split is empty; check the dataset root (%s)", self.dataset_name, split, self.root)
        elif not records:
            # Stop here, naming what to check, rather than at the DataLoader's sampler.
            seen = f"{len(found.records) + excluded} file(s) found there, none in this split" if found.records or excluded \
                else "no video of this dataset found there"
            raise ValueError(
                f"{self.dataset_name} {split}: the split is empty; dataset root {self.root}: {seen}"
                f"{' (excluded: ' + '; '.join(f'{r}: {n}' for r, n in summary.excluded.items()) + ')' if excluded else ''}. "
                "Check data.init_args.root (the folder holding this dataset's videos) and the protocol; "
                f"dna-video prepare <dataset> {self.root} lists what it holds per protocol"
            )
        return records

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"split {split!r} is not set up; call setup() first")
        dataset = self.datasets[split]
        random_order = shuffle
        sampler = None if shuffle else _evaluation_sampler(dataset)
        generator = None
        if self.data_seed is not None:
            if shuffle:
                sampler, shuffle = _seeded_sampler(dataset, self.data_seed), False
            # The loader's own draws (its workers' base seed) leave the global generator alone.
            generator = torch.Generator().manual_seed(self.data_seed)
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            sampler=sampler,
            generator=generator,
            drop_last=random_order and len(dataset) > self.batch_size,
            num_workers=self.num_workers,
            collate_fn=collate_videos,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            multiprocessing_context=self.multiprocessing_context,
            timeout=self.timeout,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)


class ProtocolDataModule(VideoDataModule):
    """A dataset whose splits come from a protocol (:class:`~.protocols.Protocol`) applied to
    the file names under the root, scanned once into a :class:`Catalog`.

    Subclasses set ``protocol`` and implement :meth:`list_files` and :meth:`make_catalog`.

    Args:
        root: the dataset's video folder.
        strict: stop with an error naming them on malformed file names and unknown field
            values, instead of leaving them out with a count.
        kwargs: everything :class:`VideoDataModule` takes.
    """

    protocol: Protocol

    def __init__(self, root: str, strict: bool = False, **kwargs) -> None:
        super().__init__(root=root, **kwargs)
        self.strict = strict
        self._catalog: Catalog | None = None

    @property
    def class_names(self) -> list[str]:
        return list(self.protocol.classes)

    @property
    def dataset_name(self) -> str:
        return f"{type(self).__name__}[{self.protocol.name}]"

    def list_files(self) -> tuple[list[Path], str]:
        """The files under the root this dataset reads, and the folder listed (for logs)."""
        raise NotImplementedError

    def make_catalog(self, files: list[Path]) -> Catalog:
        """``files`` sorted into this protocol's splits, or left out with a reason."""
        raise NotImplementedError

    def catalog(self, listing: tuple[list[Path], str] | None = None) -> Catalog:
        """The root's files sorted into splits, once; strict mode applied, the summary
        logged. ``listing``: what :meth:`list_files` returned, e.g. shared by the protocols
        of ``prepare``, instead of listing the root again."""
        if self._catalog is None:
            files, folder = listing or self.list_files()
            catalog = self.make_catalog(files)
            catalog.raise_if_strict(self.strict)
            catalog.log_summary(folder)
            self._catalog = catalog
        return self._catalog

    def build_split(self, split: str) -> SplitRecords:
        return self.catalog().split(split)
