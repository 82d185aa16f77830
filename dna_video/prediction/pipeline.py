"""Videos through a backend, one answer per file: each video read as its evaluation was
configured (:func:`~dna_video.prediction.views.load_views`: frames, sampling, clips x crops),
its views through the network, the probabilities of their mean (:meth:`Backend.probs
<dna_video.prediction.backend.Backend.probs>`), and the pre-head features when asked.

A video that cannot be read, or has a side below the network's patch size, is set aside with
its reason (``on_skip`` hears of it at once: ``predict`` names it in one line) and the others
go on. ``num_workers`` threads read and prepare the next videos while the network runs (the
decoders and the resize release the GIL).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dna_video.common.atomic import atomic_path
from dna_video.data.video import VideoDecodeError, VideoTooSmallError
from dna_video.prediction.backend import Backend
from dna_video.prediction.views import VideoViews, load_views

log = logging.getLogger(__name__)

__all__ = ["Predictions", "predict_videos", "write_features"]


@dataclass
class Predictions:
    """What :func:`predict_videos` found.

    Attributes:
        paths: the videos predicted, in the order given.
        probs: (N, K) float32 class probabilities of ``paths``.
        features: (N, D) float32 pre-head features (the mean over each video's views) when
            asked, else None.
        failed: (path, reason) of the videos that could not be read.
        refused: (path, reason) of the videos too small for the network.
        frames: per video of ``paths``: (decodable frames, frames a clip without repeats needs).
    """

    paths: list[str]
    probs: np.ndarray
    features: np.ndarray | None = None
    failed: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    frames: list[tuple[int, int]] = field(default_factory=list)

    @property
    def short(self) -> list[tuple[str, int, int]]:
        """(path, frames, frames needed) of the videos shorter than the clip."""
        return [(p, n, need) for p, (n, need) in zip(self.paths, self.frames) if n < need]


def _in_order(items: Iterable[str], work: Callable[[str], Any], workers: int) -> Iterator[Any]:
    """``work(item)`` of each item in order; with ``workers`` > 0 done ahead in that many
    threads, at most 2 x workers results waiting."""
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


def _skipped(path: str, reason: str, refused: bool) -> None:
    log.warning("%s %s: %s", "refused" if refused else "cannot read", path, reason)


def predict_videos(model: Backend, videos: Sequence[str], num_workers: int = 0, chunk: int = 32,
                   features: bool = False,
                   on_skip: Callable[[str, str, bool], None] = _skipped) -> Predictions:
    """Probabilities of the readable ``videos`` (and their pre-head features when asked), and
    the videos that could not be read or were refused, each told to ``on_skip(path, reason,
    refused)`` as it comes (default: one logged line). ``chunk`` views go through the network
    at a time.

    Raises:
        FeaturesUnavailable: ``features`` asked of a backend that has none (an ``.onnx`` model).
    """
    settings, min_side = model.settings, model.patch_size

    def views_of(path: str) -> tuple[str, VideoViews | None, str, bool]:
        try:
            return path, load_views(path, settings, min_side, model.prepare), "", False
        except VideoTooSmallError as exc:
            return path, None, exc.reason, True
        except VideoDecodeError as exc:
            return path, None, exc.reason, False
        except ValueError as exc:  # a video without frames
            return path, None, str(exc), False

    found = Predictions([], np.empty((0, model.num_classes), np.float32))
    probs, embeddings = [], []
    for path, loaded, reason, too_small in _in_order(videos, views_of, num_workers):
        if loaded is None:
            (found.refused if too_small else found.failed).append((path, reason))
            on_skip(path, reason, too_small)
            continue
        if features:
            logits, view_features = model.embed(loaded.views, chunk)
            probs.append(model.combine(logits[None])[0])
            embeddings.append(view_features.mean(axis=0, dtype=np.float32))
        else:
            probs.append(model.probs(loaded.views[None], chunk)[0])
        found.paths.append(path)
        found.frames.append((loaded.num_frames, loaded.frames_needed))
    if probs:
        found.probs = np.stack(probs)
    if features:
        found.features = np.stack(embeddings) if embeddings else np.empty((0, 0), np.float32)
    return found


def write_features(path: str | Path, paths: Sequence[str], features: Any) -> Path:
    """Each video's features (N, D) with its path, atomically. ``.npy``: a structured array with
    fields ``path`` and ``features`` (loads with plain ``np.load``, no pickle); ``.pt``:
    ``{"paths": [...], "features": (N, D) float tensor}`` (torch is imported for it).

    Raises:
        ValueError: another suffix.
    """
    path = Path(path)
    if path.suffix not in (".pt", ".npy"):
        raise ValueError(f"--features {path}: use a .npy or .pt file")
    features = np.asarray(features, np.float32)
    with atomic_path(path) as partial:
        if path.suffix == ".pt":
            import torch

            torch.save({"paths": list(paths), "features": torch.from_numpy(features)}, partial)
        else:
            width = max((len(p) for p in paths), default=1)
            table = np.zeros(len(paths), dtype=[("path", f"U{width}"), ("features", "f4", (features.shape[1],))])
            table["path"] = list(paths)
            table["features"] = features
            np.save(partial, table)
    return path
