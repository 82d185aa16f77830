"""Map-style dataset: record -> frame indices -> decoded frames -> transformed clip(s).

A sample is a dict:

* ``video``: training (C, T, H, W); evaluation (V, C, T, H, W) with V = num_clips x
  num_crops views of the SAME video, so predictions can be combined per video;
* ``label``: int class index; ``index``: position of the record in the split;
  ``path``: the file; ``failed``: how many unreadable files this sample stands for and
  ``failed_paths``: their paths;
* ``frames``: the file's decodable frames and ``frames_needed``: how many a clip without
  repeated frames needs (:meth:`~.sampling.FrameSampler.frames_needed`). A shorter video is
  sampled as ``short_video`` says (clamped or looped) and :func:`collate_videos` lists it in
  the batch's ``short_videos``, for the per-epoch warning that counts such videos.

A file that cannot be decoded (zero-length, truncated, corrupt, not a video) is logged in one
line with its path and what it is (``empty file (0 bytes)``, ``not a video (...)``: see
:mod:`.video`). In training it is replaced by another random record not tried yet for this
sample (at most ``max_retries`` tries, then a clear error: never an endless loop) whose own
label comes with it, so a label never travels with the wrong clip. In evaluation a replacement
would count another video twice, so the sample is dropped by :func:`collate_videos` and
counted instead.

Where the random draws come from: by default torch's global generator (seeded per DataLoader
worker); an index that is a :class:`~.seeding.SeededItem` (from :class:`~.seeding.SeededSampler`)
brings its own seed, and then the clip position, a replacement record and the transform's
scale, crop and flip come from that seed alone. With ``cache_decoded`` each file is decoded
once, whole, and every later clip is taken from memory (the same frames as a decode of
those indices).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace

import numpy as np
import torch
from einops import rearrange
from torch.utils.data import Dataset, default_collate

from dna_video.data.records import RecordTable, VideoRecord
from dna_video.data.sampling import FrameSampler
from dna_video.data.seeding import SeededItem, torch_draws_from
from dna_video.data.video import VideoDecodeError, VideoFrames, read_frames

log = logging.getLogger(__name__)

__all__ = ["VideoRecord", "RecordTable", "VideoClipDataset", "collate_videos"]


class VideoClipDataset(Dataset):
    """Clips of ``records`` sampled by ``sampler`` and transformed by ``transform``.

    The split's videos are kept as arrays (:class:`~.records.RecordTable`, :attr:`records`),
    not one Python object per video: DataLoader workers read them without copying them
    (benchmarks/README.md, "Full-size datasets").

    Args:
        records: the split's videos (a :class:`~.records.RecordTable` or any sequence of
            :class:`~.records.VideoRecord`).
        sampler: chooses frame indices.
        transform: uint8 (T, C, H, W) -> (C, T, h, w) in training, (crops, C, T, h, w) in
            evaluation.
        train: random clip (training) or ``num_clips`` evenly spaced clips (evaluation).
        num_clips: temporal views per video in evaluation.
        max_retries: in training, how many other records to try when a file fails.
        slow_decode_warning: seconds after which a decode still running is logged with its
            path (0: never). A decoder stuck inside C code cannot be interrupted, but this
            names the file before the DataLoader's timeout stops the run.
        decoder: ``decord``, ``pyav`` or ``torchcodec`` (:mod:`.decoders`).
        cache_decoded: keep every decoded file whole (all its decodable frames, uint8) and its
            masks in this process, and take each clip from there: a file is decoded once per
            process (:meth:`fill_cache` decodes them all at once).
        mask_reader: video path -> ground-truth masks bool (N, M, H, W) for its N frames (e.g.
            :func:`~.distractors.read_masks`); when given, each sample also holds ``masks``,
            the SAME frames, resize, crop and flip as its clip: (M, T, h, w) in training,
            (views, M, T, h, w) in evaluation.
    """

    def __init__(
        self,
        records: RecordTable | Sequence[VideoRecord],
        sampler: FrameSampler,
        transform: Callable[[torch.Tensor], torch.Tensor],
        train: bool,
        num_clips: int = 1,
        max_retries: int = 10,
        slow_decode_warning: float = 0.0,
        mask_reader: Callable[[str], np.ndarray] | None = None,
        decoder: str = "decord",
        cache_decoded: bool = False,
    ) -> None:
        self.records = RecordTable.of(records)
        self.sampler = sampler
        self.transform = transform
        self.train = train
        self.num_clips = num_clips
        self.max_retries = max_retries
        self.slow_decode_warning = slow_decode_warning
        self.mask_reader = mask_reader
        self.decoder = decoder
        # path -> the whole decoded file; path -> its masks (with cache_decoded).
        self.decoded: dict[str, VideoFrames] | None = {} if cache_decoded else None
        self.cached_masks: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.records)

    def _rng(self) -> np.random.Generator:
        # Drawn from torch's generator, which DataLoader seeds per worker (and
        # seed_everything(workers=True) makes reproducible).
        return np.random.default_rng(int(torch.randint(0, 2**62, ()).item()))

    @contextmanager
    def _watch(self, path: str):
        """Log ``path`` if decoding it outlasts ``slow_decode_warning`` (a timer thread: it
        runs while decord's ctypes calls hold no GIL)."""
        if self.slow_decode_warning <= 0:
            yield
            return
        timer = threading.Timer(
            self.slow_decode_warning, log.warning,
            ("still decoding %s after %g s: the decoder may hang on this file (transcode or "
             "remove it; dna-video prepare ... --validate checks every file)", path,
             self.slow_decode_warning),
        )
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _read(self, path: str, choose: Callable[[int, float], np.ndarray]) -> VideoFrames:
        """The frames ``choose(num_frames, fps)`` picks from ``path``: decoded now, or taken
        from the whole file decoded once (``cache_decoded``)."""
        if self.decoded is None:
            return read_frames(path, choose, self.decoder)
        whole = self.decoded.get(path)
        if whole is None:
            whole = read_frames(path, lambda n, fps: np.arange(n), self.decoder)
            self.decoded[path] = whole
        indices = np.asarray(choose(whole.num_frames, whole.fps), dtype=np.int64)
        return replace(whole, frames=whole.frames[indices.reshape(-1)])

    def fill_cache(self) -> tuple[int, int, int]:
        """Decode every file of the split into the cache now (with ``cache_decoded``): a
        DataLoader worker started by ``fork`` afterwards shares it. Returns (videos cached,
        their bytes, frames and masks, files that failed to decode: left to :meth:`__getitem__`,
        which logs and replaces or drops them)."""
        if self.decoded is None:
            raise RuntimeError("fill_cache: this dataset was made without cache_decoded")
        failed = 0
        for path in self.records.paths:
            try:
                self._read(path, lambda n, fps: np.zeros(0, np.int64))
                if self.mask_reader is not None:
                    self._mask_array(path)
            except VideoDecodeError:
                failed += 1
        size = sum(v.frames.nbytes for v in self.decoded.values()) + sum(m.nbytes for m in self.cached_masks.values())
        return len(self.decoded), size, failed

    def load(self, index: int, rng: np.random.Generator | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Decode and transform the clip(s) of record ``index`` (and its masks, with a
        ``mask_reader``: then a (video, masks) pair)."""
        return self._load(index, rng)[0]

    def _load(self, index: int, rng: np.random.Generator | None = None, transform_seed: int | None = None):
        """:meth:`load` and the decoded file's facts (:class:`~.video.VideoFrames`). With
        ``transform_seed``, the training transform draws from it, not from torch's global
        generator."""
        record = VideoRecord(self.records.path(index), self.records.label(index))
        chosen: list[np.ndarray] = []

        def pick(indices: np.ndarray) -> np.ndarray:
            chosen.append(indices)  # the masks take exactly these frames
            return indices

        if self.train:
            rng = rng or self._rng()
            with self._watch(record.path):
                decoded = self._read(record.path, lambda n, fps: pick(self.sampler.train_indices(n, fps, rng)))
            frames = rearrange(torch.from_numpy(decoded.frames), "t h w c -> t c h w")
            draws = nullcontext() if transform_seed is None else torch_draws_from(transform_seed)
            with draws:
                if self.mask_reader is None:
                    return self.transform(frames), decoded
                return self.transform(frames, self._masks(record.path, chosen[-1], decoded.num_frames)), decoded
        with self._watch(record.path):
            decoded = self._read(record.path, lambda n, fps: pick(self.sampler.view_indices(n, fps, self.num_clips)))
        clips = rearrange(torch.from_numpy(decoded.frames), "(k t) h w c -> k t c h w", k=self.num_clips)
        if self.mask_reader is None:
            # (clips, crops, C, T, h, w) -> views ordered clip-major.
            views = torch.stack([self.transform(clip) for clip in clips])
            return rearrange(views, "k s c t h w -> (k s) c t h w"), decoded
        masks = self._masks(record.path, chosen[-1], decoded.num_frames)
        pairs = [self.transform(clip, clip_masks) for clip, clip_masks in zip(clips, masks)]
        views = rearrange(torch.stack([v for v, _ in pairs]), "k s c t h w -> (k s) c t h w")
        return (views, rearrange(torch.stack([m for _, m in pairs]), "k s m t h w -> (k s) m t h w")), decoded

    def _masks(self, path: str, indices: np.ndarray, num_frames: int) -> torch.Tensor:
        """The masks of ``indices`` (any shape) as uint8 (..., M, H, W)."""
        masks = self._mask_array(path)
        if len(masks) < num_frames:
            raise ValueError(f"{path}: {len(masks)} mask frames for a video of {num_frames} decodable frames")
        return torch.from_numpy(masks[indices].astype(np.uint8))

    def _mask_array(self, path: str) -> np.ndarray:
        """All the masks of ``path``, read once per process with ``cache_decoded``."""
        if self.decoded is None:
            return self.mask_reader(path)
        if path not in self.cached_masks:
            self.cached_masks[path] = self.mask_reader(path)
        return self.cached_masks[path]

    def __getitem__(self, item: int | SeededItem) -> dict:
        """The sample of record ``item``; a :class:`~.seeding.SeededItem` also brings the seed
        of its random draws (clip position, replacement, transform)."""
        failed: list[str] = []
        if isinstance(item, SeededItem):
            index, rng = item.index, np.random.default_rng(item.seed)
            # Drawn first, so the transform's stream does not depend on how many draws the clip took.
            transform_seed = int(rng.integers(2**63))
        else:
            index, rng, transform_seed = item, self._rng(), None
        while True:
            try:
                video, decoded = self._load(index, rng, transform_seed)
                masks = None
                if isinstance(video, tuple):
                    video, masks = video
            except VideoDecodeError as exc:
                path = self.records.path(index)
                failed.append(path)
                if not self.train:
                    log.warning("leaving out unreadable video (%s)", exc)
                    return {"video": None, "path": path, "failed": 1, "failed_paths": failed}
                # Drawn among the files not tried yet: a file that failed fails again, and
                # drawing it twice would spend the retries on one file.
                untried = [i for i, p in enumerate(self.records.paths) if p not in failed]
                if len(failed) > self.max_retries or not untried:
                    raise VideoDecodeError(
                        f"{len(failed)} unreadable videos in a row{'' if untried else ' and no other video to try'}, "
                        f"the last {path}; check the dataset (dna-video prepare <dataset> "
                        "<root> --validate checks every file)"
                    ) from exc
                log.warning("replacing unreadable video by another (%s)", exc)
                index = untried[int(rng.integers(len(untried)))]
                continue
            sample = {
                "video": video, "label": self.records.label(index), "index": index, "path": self.records.path(index),
                "failed": len(failed), "failed_paths": failed,
                "frames": decoded.num_frames, "frames_needed": self.sampler.frames_needed(decoded.fps),
            }
            if masks is not None:
                sample["masks"] = masks
            return sample


def collate_videos(samples: list[dict]) -> dict:
    """Batch samples, dropping evaluation samples whose video failed (``video`` None).

    ``failed`` is the number of unreadable files behind the batch (replaced or dropped) and
    ``failed_paths`` their paths, so the LightningModule can count and name them;
    ``short_videos`` lists (path, frames, frames needed) of the videos shorter than the clip."""
    failed_paths = [p for s in samples for p in s["failed_paths"]]
    kept = [s for s in samples if s["video"] is not None]
    if not kept:
        return {"video": None, "failed": len(failed_paths), "failed_paths": failed_paths, "short_videos": []}
    apart = ("failed", "failed_paths", "frames", "frames_needed")
    batch = default_collate([{k: v for k, v in s.items() if k not in apart} for s in kept])
    batch["failed"] = len(failed_paths)
    batch["failed_paths"] = failed_paths
    batch["short_videos"] = [
        (s["path"], s["frames"], s["frames_needed"]) for s in kept if s.get("frames", 0) < s.get("frames_needed", 0)
    ]
    return batch
