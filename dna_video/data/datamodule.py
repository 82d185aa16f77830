"""Base LightningDataModule for video classification: splits -> datasets -> loaders.

A concrete DataModule says which classes it has (:attr:`class_names`) and which videos make
each split (:meth:`build_split`); this base owns sampling, transforms and loading, so every
dataset (synthetic, Toyota Smarthome, NTU RGB+D, list files) goes through the same path.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

import lightning as L
from torch.utils.data import DataLoader

from .dataset import VideoClipDataset, VideoRecord, collate_videos
from .sampling import FrameSampler
from .transforms import EvalClipTransform, TrainClipTransform

log = logging.getLogger(__name__)

__all__ = ["VideoDataModule"]

SPLITS = ("train", "val", "test")


class VideoDataModule(L.LightningDataModule):
    """Clip sampling, transforms and loaders shared by every video dataset.

    Args:
        root: folder holding the dataset's videos.
        batch_size: clips per training batch; videos per evaluation batch.
        num_workers: DataLoader worker processes (each decodes with one thread).
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
        val_num_crops: spatial views per video in validation (1 centre or 3 along the long side).
        test_num_clips: temporal views per video in test and predict.
        test_num_crops: spatial views per video in test and predict (1 or 3).
        max_retries: in training, how many other videos to try when a file cannot be decoded.
        pin_memory: pin batches in page-locked memory (for GPU training).
        persistent_workers: keep workers alive between epochs.
        multiprocessing_context: ``fork``, ``spawn`` or ``forkserver`` (None: platform default).
    """

    def __init__(
        self,
        root: str,
        batch_size: int = 8,
        num_workers: int = 4,
        num_frames: int = 8,
        sampling_rate: int = 32,
        target_fps: float | None = 30.0,
        sampling: str = "clip",
        short_video: str = "clamp",
        train_short_side: tuple[int, int] = (256, 320),
        crop_size: int = 224,
        hflip: bool = True,
        mean: Sequence[float] = (0.45, 0.45, 0.45),
        std: Sequence[float] = (0.225, 0.225, 0.225),
        val_num_clips: int = 1,
        val_num_crops: int = 1,
        test_num_clips: int = 1,
        test_num_crops: int = 3,
        max_retries: int = 10,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        multiprocessing_context: str | None = None,
    ) -> None:
        super().__init__()
        self.root = root
        self.batch_size = batch_size
        self.num_workers = num_workers
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
        self.datasets: dict[str, VideoClipDataset] = {}

    # -- what a concrete dataset provides -------------------------------------------------
    @property
    def class_names(self) -> list[str]:
        """Class names in label order (line i = label i)."""
        raise NotImplementedError

    def build_split(self, split: str) -> list[VideoRecord]:
        """The videos of ``split`` (``train``, ``val`` or ``test``)."""
        raise NotImplementedError

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
            return VideoClipDataset(records, self.sampler, transform, train=True, max_retries=self.max_retries)
        clips, crops = self.views[split]
        transform = EvalClipTransform(self.crop_size, crops, self.mean, self.std)
        return VideoClipDataset(records, self.sampler, transform, train=False, num_clips=clips)

    def setup(self, stage: str | None = None) -> None:
        wanted = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}
        for split in wanted.get(stage, SPLITS) if stage else SPLITS:
            if split in self.datasets:
                continue
            records = self.build_split(split)
            counts = Counter(r.label for r in records)
            log.info(
                "%s %s: %d videos, %d/%d classes present",
                type(self).__name__, split, len(records), len(counts), self.num_classes,
            )
            self.datasets[split] = self.make_dataset(split, records)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"split {split!r} is not set up; call setup() first")
        return DataLoader(
            self.datasets[split],
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=shuffle and len(self.datasets[split]) > self.batch_size,
            num_workers=self.num_workers,
            collate_fn=collate_videos,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            multiprocessing_context=self.multiprocessing_context,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
