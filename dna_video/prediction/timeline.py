"""A long, untrimmed video as a timeline: the model's clip window slid along it.

The windows and each window's frames decoded once: :mod:`.windows`. Each window's spatial views
(the evaluation's crops) are combined as the model combines views
(:func:`~dna_video.tasks.views.mean_view_probs`); the probabilities can be smoothed over
neighbouring windows (:func:`smooth`) and consecutive windows of the same top-1 class make a
segment (:func:`segments_of`; segments shorter than a minimum are merged into a neighbour).
:func:`write_timeline` writes, named after the video: ``<stem>_windows.csv`` (``start_s,
end_s`` and the top-k classes with their probabilities per window), ``<stem>_segments.json``,
``<stem>.srt`` (the segments as subtitles: any player shows the labels) and
``<stem>_timeline.png`` (:func:`~dna_video.analysis.plotting.timeline_figure`, imported only
then), each atomically.

:func:`video_timeline` runs a backend (a checkpoint's network or an ``.onnx`` model) over it;
:func:`sliding_timeline` is the same with any two functions in its place.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from dna_video.common.atomic import write_json, write_text
from dna_video.data.sampling import FrameSampler
from dna_video.data.video import check_frame_size, frame_size, open_stream
from dna_video.prediction.backend import Backend
from dna_video.prediction.records import top_classes
from dna_video.prediction.windows import Stride, TimelineStats, Windows, parse_stride, plan_windows, window_clips

log = logging.getLogger(__name__)

__all__ = [
    "Timeline", "sliding_timeline", "video_timeline", "smooth", "Segment", "segments_of", "windows_csv",
    "srt_timestamp", "srt_text", "TimelineFiles", "write_timeline", "describe",
    # the windows' names, importable from here as in 0.2 (dna_video.analysis.timeline / .windows)
    "Stride", "parse_stride", "Windows", "plan_windows", "TimelineStats", "window_clips",
]


# -- a timeline's probabilities ----------------------------------------------------------------


@dataclass
class Timeline:
    """Class probabilities along one video.

    Attributes:
        path: the video.
        windows: where the windows lie (all of them; ``probs`` may stop short of a damaged end).
        probs: (W, K) float32 probabilities of each window (its spatial views combined).
        class_names: names in label order.
        stats: decoding and timing (:class:`TimelineStats`).
    """

    path: str
    windows: Windows
    probs: np.ndarray
    class_names: list[str]
    stats: TimelineStats = field(default_factory=TimelineStats)

    @property
    def count(self) -> int:
        """Windows with probabilities."""
        return len(self.probs)


def sliding_timeline(path: str, decoder: str, sampler: FrameSampler, class_names: Sequence[str],
                     prepare: Callable[[np.ndarray], np.ndarray], probs_of: Callable[[list], np.ndarray],
                     stride: Stride | None = None, windows_per_pass: int = 10, decode_chunk: int = 32,
                     min_side: int = 0) -> Timeline:
    """The timeline of the video at ``path``, whatever runs the network: :func:`plan_windows` of
    ``sampler`` and ``stride``, :func:`window_clips` (read by ``decoder``, each sampled frame
    ``prepare``\\ d once into its views (crops, C, h, w), a window its T prepared frames), and
    ``probs_of`` a list of at most ``windows_per_pass`` windows -> their (B, K) probabilities
    (the views of each combined). ``min_side``: refuse a video with a side below
    it (the network's patch size), on the header's size and on the decoded frames.

    Raises:
        VideoDecodeError: the file cannot be decoded.
        VideoTooSmallError: a side below ``min_side``.
        ValueError: ``sampler`` samples ``uniform`` clips.
    """
    if min_side > 1:
        check_frame_size(path, *frame_size(path), min_side)
    start = time.perf_counter()
    stats = TimelineStats()
    probs: list[np.ndarray] = []
    batch: list[list[np.ndarray]] = []

    def checked(frames: np.ndarray) -> np.ndarray:
        if min_side > 1:
            check_frame_size(path, *frames.shape[1:3], min_side)
        return prepare(frames)

    with open_stream(path, decoder) as stream:
        windows = plan_windows(stream.num_frames, stream.fps, sampler, stride)
        if windows.span > windows.num_frames:
            log.warning("%s: %d frames, shorter than one window (%.0f frames): one window, frames repeated", path,
                        windows.num_frames, windows.span)
        for _, frames in window_clips(stream, windows, checked, decode_chunk, stats):
            batch.append(frames)
            if len(batch) == windows_per_pass:
                probs.append(np.asarray(probs_of(batch), dtype=np.float32))
                batch = []
    if batch:
        probs.append(np.asarray(probs_of(batch), dtype=np.float32))
    stats.windows = sum(len(p) for p in probs)
    stats.seconds = time.perf_counter() - start
    stats.video_seconds = float(windows.end_s[stats.windows - 1]) if stats.windows else 0.0
    found = np.concatenate(probs) if probs else np.empty((0, len(class_names)), np.float32)
    return Timeline(path, windows, found, list(class_names), stats)


def video_timeline(model: Backend, path: str, stride: Stride | None = None, views_per_pass: int = 32,
                   decode_chunk: int = 32) -> Timeline:
    """Slide ``model``'s clip window along the video at ``path``: probabilities of every
    window, the evaluation's crops of each combined (:func:`sliding_timeline` with the backend's
    ``prepare`` and ``probs_of``, at most ``views_per_pass`` views a pass).

    Raises:
        VideoDecodeError: the file cannot be decoded.
        VideoTooSmallError: a side below the network's patch size.
        ValueError: the model samples ``uniform`` clips.
    """
    settings = model.settings
    return sliding_timeline(path, settings.decoder, settings.sampler, model.class_names, model.prepare,
                            model.probs_of, stride, max(1, views_per_pass // settings.num_crops), decode_chunk,
                            min_side=model.patch_size)


# -- smoothing and segments ----------------------------------------------------------------------


def smooth(probs: np.ndarray, k: int) -> np.ndarray:
    """Moving average of (W, K) ``probs`` over ``k`` windows centred on each (``k`` odd; an
    even ``k`` reaches one window further ahead); near the ends, over the windows there are.
    ``k`` <= 1: unchanged. Summed in float64, returned in ``probs``' dtype."""
    probs = np.asarray(probs)
    if k <= 1 or len(probs) < 2:
        return probs
    before, after = (k - 1) // 2, k // 2
    padded = np.concatenate([np.zeros((1, probs.shape[1])), probs.astype(np.float64).cumsum(0)])
    n = len(probs)
    lo = np.maximum(np.arange(n) - before, 0)
    hi = np.minimum(np.arange(n) + after + 1, n)
    return ((padded[hi] - padded[lo]) / (hi - lo)[:, None]).astype(probs.dtype)


@dataclass(frozen=True)
class Segment:
    """Consecutive windows of one top-1 class: from ``start_s`` to ``end_s``, class ``label``
    (``name``), ``prob`` its mean probability over the segment's ``windows``."""

    start_s: float
    end_s: float
    label: int
    name: str
    prob: float
    windows: int

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


def _runs(labels: np.ndarray) -> list[tuple[int, int]]:
    """[first, last + 1) of each run of equal values."""
    cuts = np.flatnonzero(np.diff(labels)) + 1
    edges = [0, *cuts.tolist(), len(labels)]
    return list(zip(edges[:-1], edges[1:]))


def segments_of(probs: np.ndarray, windows: Windows, class_names: Sequence[str], min_length_s: float = 0.0) -> list[Segment]:
    """Segments of the (W', K) window probabilities ``probs`` (W' <= len(windows): a damaged
    end stops early). Consecutive windows with the same top-1 class make one segment; a
    boundary lies halfway between the centres of the last window of one segment and the first
    of the next; the first segment starts at 0 and the last ends where the last window ends.

    ``min_length_s``: a segment shorter than this (the shortest first) is merged into the
    neighbour whose class is more probable over its windows, until none is or one is left.
    """
    probs = np.asarray(probs)
    count = len(probs)
    if count == 0:
        return []
    labels = probs.argmax(1)
    centres = windows.centre_s[:count]
    end = float(windows.end_s[count - 1])

    def bounds(first: int, stop: int) -> tuple[float, float]:
        lo = 0.0 if first == 0 else float(centres[first - 1] + centres[first]) / 2
        hi = end if stop == count else float(centres[stop - 1] + centres[stop]) / 2
        return lo, hi

    while min_length_s > 0:
        runs = _runs(labels)
        lengths = [hi - lo for lo, hi in (bounds(*r) for r in runs)]
        short = [(length, i) for i, length in enumerate(lengths) if length < min_length_s]
        if len(runs) < 2 or not short:
            break
        first, stop = runs[min(short)[1]]
        neighbours = [labels[first - 1]] if first > 0 else []
        neighbours += [labels[stop]] if stop < count else []
        labels[first:stop] = max(neighbours, key=lambda c: float(probs[first:stop, c].mean()))
    segments = []
    for first, stop in _runs(labels):
        label = int(labels[first])
        lo, hi = bounds(first, stop)
        segments.append(Segment(round(lo, 3), round(hi, 3), label, class_names[label],
                                round(float(probs[first:stop, label].mean()), 4), stop - first))
    return segments


# -- files ---------------------------------------------------------------------------------------


def windows_csv(windows: Windows, probs: np.ndarray, class_names: Sequence[str], top_k: int = 5) -> str:
    """One row per window: ``window, start_s, end_s`` then ``top1, top1_prob, top2, ...``
    (class names, most probable first)."""
    probs = np.asarray(probs)
    k = min(top_k, probs.shape[1]) if len(probs) else min(top_k, len(class_names))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["window", "start_s", "end_s"] + [c for i in range(1, k + 1) for c in (f"top{i}", f"top{i}_prob")])
    if len(probs):
        values, indices = top_classes(probs, k)
        for w in range(len(probs)):
            ranked = [x for p, c in zip(values[w].tolist(), indices[w].tolist()) for x in (class_names[c], f"{p:.4f}")]
            writer.writerow([w, f"{windows.start_s[w]:.3f}", f"{windows.end_s[w]:.3f}", *ranked])
    return out.getvalue()


def srt_timestamp(seconds: float) -> str:
    """``HH:MM:SS,mmm`` (SubRip)."""
    millis = int(round(max(seconds, 0.0) * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d},{millis:03d}"


def srt_text(segments: Sequence[Segment]) -> str:
    """The segments as SubRip subtitles: one cue per segment, ``name (prob)``."""
    cues = [f"{i}\n{srt_timestamp(s.start_s)} --> {srt_timestamp(s.end_s)}\n{s.name} ({s.prob:.2f})\n"
            for i, s in enumerate(segments, 1)]
    return "\n".join(cues)


class TimelineFiles(NamedTuple):
    """What :func:`write_timeline` wrote: ``paths`` {"csv", "json", "srt", "png"} and the
    ``segments`` in them."""

    paths: dict[str, Path]
    segments: list[Segment]


def write_timeline(timeline: Timeline, out: str | Path, stem: str | None = None, smooth_windows: int = 1,
                   min_segment_s: float = 0.0, top_k: int = 5, extra: dict[str, Any] | None = None) -> TimelineFiles:
    """Smooth (:func:`smooth`), cut into segments (:func:`segments_of`) and write the four
    files of ``timeline`` into folder ``out``, named after the video (``stem``: default the
    file's stem), each atomically. ``extra`` is added to the JSON (e.g. the checkpoint)."""
    from dna_video.analysis.plotting import save_figure, timeline_figure

    out = Path(out)
    stem = stem or Path(timeline.path).stem
    windows, names = timeline.windows, timeline.class_names
    probs = smooth(timeline.probs, smooth_windows)
    segments = segments_of(probs, windows, names, min_segment_s)
    stats = timeline.stats
    record = {
        "video": timeline.path, **(extra or {}), "fps": windows.fps, "frames": windows.num_frames,
        "duration_s": round(windows.duration_s, 3), "window_s": round(windows.window_s, 4),
        "stride_s": round(windows.stride_s, 4), "windows": timeline.count, "smooth_windows": smooth_windows,
        "min_segment_s": min_segment_s, "class_names": names, "segments": [asdict(s) for s in segments],
        "decoding": {"frames_decoded": stats.decoded_frames, "frames_sampled": stats.unique_frames,
                     "peak_frames_held": stats.peak_held_frames},
        "throughput": {"seconds": round(stats.seconds, 3), "video_seconds_per_second": round(stats.throughput, 3)},
    }
    paths = {"csv": out / f"{stem}_windows.csv", "json": out / f"{stem}_segments.json", "srt": out / f"{stem}.srt",
             "png": out / f"{stem}_timeline.png"}
    write_text(paths["csv"], windows_csv(windows, probs, names, top_k))
    write_json(paths["json"], record)
    write_text(paths["srt"], srt_text(segments))
    smoothed = f", smoothed over {smooth_windows} windows" if smooth_windows > 1 else ""
    title = f"{Path(timeline.path).name}: {windows.window_s:.2f} s windows every {windows.stride_s:.2f} s{smoothed}"
    count = timeline.count
    figure = timeline_figure(windows.start_s[:count], windows.end_s[:count], probs, names,
                             [(s.start_s, s.end_s, s.label, s.prob) for s in segments], title=title)
    save_figure(figure, paths["png"])
    return TimelineFiles(paths, segments)


def describe(timeline: Timeline) -> str:
    """One line: the video's seconds, wall seconds and the throughput."""
    stats = timeline.stats
    return (f"{Path(timeline.path).name}: {stats.video_seconds:.1f} s of video in {stats.seconds:.2f} s "
            f"({stats.throughput:.1f} s of video per second; {stats.windows} windows, "
            f"{stats.decoded_frames} frames decoded once)")
