"""Video files through an :class:`~.model.OnnxModel`: one answer per file (:func:`predict_videos`)
or a long video's timeline (:func:`video_timeline`), the PyTorch ``predict``'s steps with numpy
in place of torch.

* Frames: the same indices (:class:`~dna_video.data.sampling.FrameSampler`'s evaluation views;
  the timeline's windows of :mod:`dna_video.analysis.windows`), decoded by the same decoders.
* Views: :mod:`.preprocess` (the evaluation transform in numpy), clip-major like the test loader.
* Probabilities: each video's (or window's) views combined as the model was evaluated.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dna_video.analysis.windows import Stride, Timeline, sliding_timeline
from dna_video.data.eval_settings import EvalSettings, read_view_frames
from dna_video.data.video import VideoDecodeError, VideoTooSmallError
from dna_video.runtime.model import OnnxModel
from dna_video.runtime.preprocess import clip_views, frame_views

log = logging.getLogger(__name__)

__all__ = ["VideoViews", "load_views", "Predictions", "predict_videos", "OnnxWindows", "video_timeline"]


@dataclass
class VideoViews:
    """The evaluation views of one video and its length against the clip's."""

    views: np.ndarray  # (V, 3, T, crop, crop) float32, clip-major
    num_frames: int  # the file's decodable frames
    frames_needed: int  # fewest frames for clips without repeated frames


def load_views(path: str, settings: EvalSettings, min_side: int = 0) -> VideoViews:
    """Every evaluation view of one video file (``num_clips`` clips x ``num_crops`` crops), as
    :func:`dna_video.analysis.inference.load_views` makes them with torch.

    Raises:
        VideoDecodeError: the file cannot be decoded (the message names it and what it is).
        VideoTooSmallError: a side below ``min_side``.
        ValueError: a video without frames.
    """
    decoded = read_view_frames(path, settings, min_side)
    clips = decoded.frames.reshape(settings.num_clips, settings.num_frames, *decoded.frames.shape[1:])
    views = np.concatenate([clip_views(clip, settings.crop_size, settings.num_crops, settings.mean, settings.std)
                            for clip in clips])
    return VideoViews(views, decoded.num_frames, settings.sampler.frames_needed(decoded.fps))


@dataclass
class Predictions:
    """What :func:`predict_videos` found.

    Attributes:
        paths: the videos predicted, in the order given.
        probs: (N, K) float32 class probabilities of ``paths``.
        failed: (path, reason) of the videos that could not be read.
        refused: (path, reason) of the videos too small for the network.
        frames: per video of ``paths``: (decodable frames, frames a clip without repeats needs).
    """

    paths: list[str]
    probs: np.ndarray
    failed: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    frames: list[tuple[int, int]] = field(default_factory=list)

    @property
    def short(self) -> list[tuple[str, int, int]]:
        """(path, frames, frames needed) of the videos shorter than the clip."""
        return [(p, n, need) for p, (n, need) in zip(self.paths, self.frames) if n < need]


def _in_order(items: Iterable[str], work: Callable[[str], Any], workers: int) -> Iterator[Any]:
    """``work(item)`` of each item in order; with ``workers`` > 0 done ahead in that many
    threads (the decoders release the GIL), at most 2 x workers results waiting."""
    if workers <= 0:
        yield from map(work, items)
        return
    items = iter(items)
    with ThreadPoolExecutor(workers) as pool:
        pending = deque(pool.submit(work, item) for _, item in zip(range(2 * workers), items))
        while pending:
            result = pending.popleft().result()
            following = next(items, None)
            if following is not None:
                pending.append(pool.submit(work, following))
            yield result


def predict_videos(model: OnnxModel, videos: Sequence[str], num_workers: int = 0, chunk: int = 32) -> Predictions:
    """Probabilities of the readable ``videos`` and the videos that could not be read or were
    refused, each logged in one line with its reason. ``num_workers`` threads decode ahead."""
    settings, min_side = model.settings, model.patch_size

    def views_of(path: str) -> tuple[str, VideoViews | None, str, bool]:
        try:
            return path, load_views(path, settings, min_side), "", False
        except VideoTooSmallError as exc:
            return path, None, exc.reason, True
        except VideoDecodeError as exc:
            return path, None, exc.reason, False
        except ValueError as exc:  # a video without frames
            return path, None, str(exc), False

    found = Predictions([], np.empty((0, model.num_classes), np.float32))
    probs = []
    for path, loaded, error, too_small in _in_order(videos, views_of, num_workers):
        if loaded is None:
            what, where = ("refused", found.refused) if too_small else ("cannot read", found.failed)
            log.warning("%s %s: %s", what, path, error)
            where.append((path, error))
            continue
        probs.append(model.probs(loaded.views[None], chunk)[0])
        found.paths.append(path)
        found.frames.append((loaded.num_frames, loaded.frames_needed))
    if probs:
        found.probs = np.stack(probs)
    return found


class OnnxWindows:
    """``model`` over sliding windows (a long video's timeline, a live stream): :meth:`prepare`
    each frame once into its evaluation views, :meth:`probs_of` windows of them; the ONNX
    Runtime counterpart of :class:`dna_video.analysis.window_network.WindowNetwork`."""

    def __init__(self, model: OnnxModel) -> None:
        self.model = model
        self.settings = model.settings

    def prepare(self, frames: np.ndarray) -> np.ndarray:
        """(n, H, W, 3) uint8 -> (n, crops, 3, crop, crop) float32."""
        settings = self.settings
        return frame_views(frames, settings.crop_size, settings.num_crops, settings.mean, settings.std)

    def probs_of(self, windows: list[np.ndarray]) -> np.ndarray:
        """Windows, each (T, crops, 3, crop, crop) -> (B, K) probabilities, each window's crops
        combined as the model was evaluated."""
        views = np.stack(windows).transpose(0, 2, 3, 1, 4, 5)  # b t crops c h w -> b crops c t h w
        return self.model.probs(views)


def video_timeline(model: OnnxModel, path: str, stride: Stride | None = None, views_per_pass: int = 32,
                   decode_chunk: int = 32) -> Timeline:
    """Slide ``model``'s clip window along the video at ``path``: the windows, decoding once,
    views and files of :func:`dna_video.analysis.windows.sliding_timeline`, the network in ONNX
    Runtime (each window's crops combined as the model was evaluated).

    Raises:
        VideoDecodeError: the file cannot be decoded.
        VideoTooSmallError: a side below the network's patch size.
        ValueError: the model samples ``uniform`` clips.
    """
    settings = model.settings
    windows = OnnxWindows(model)
    return sliding_timeline(path, settings.decoder, settings.sampler, model.class_names, windows.prepare,
                            windows.probs_of, stride, max(1, views_per_pass // settings.num_crops), decode_chunk,
                            np.stack, min_side=model.patch_size)
