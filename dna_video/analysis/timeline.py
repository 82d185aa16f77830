"""A long, untrimmed video as a timeline: the model's clip window slid along it.

Windows. A clip is T frames ``s`` file frames apart (the sampling rate at the target frame
rate: :meth:`~dna_video.data.sampling.FrameSampler.stride`), so a window covers T x s frames
(T x sampling rate / target fps seconds). Windows start at 0, stride, 2 x stride... of the
file's frames, and one more ends at the video's end when a tail is left over; a video shorter
than one window has one window, its frames repeated as in evaluation. The default stride is
half the window rounded down to whole sampling steps: windows then sample the same frames
where they overlap.

Decoding. The sampled frames of all windows are decoded once, in order, in chunks
(:class:`~dna_video.data.video.FrameStream`); each frame is resized, cropped and normalised
when it arrives (evaluation's steps, frame by frame: the same numbers, done once per frame
rather than once per window) and kept only until the last window that samples it has gone
through the network. Memory holds one window's frames plus one chunk, whatever the video's
length.

Each window's spatial views (the evaluation's crops) are combined as the model combines views
(:func:`~dna_video.tasks.views.mean_view_probs`); the probabilities can be smoothed over
neighbouring windows (:func:`smooth`) and consecutive windows of the same top-1 class make a
segment (:func:`segments_of`; segments shorter than a minimum are merged into a neighbour).
:func:`write_timeline` writes, named after the video: ``<stem>_windows.csv`` (``start_s,
end_s`` and the top-k classes with their probabilities per window), ``<stem>_segments.json``,
``<stem>.srt`` (the segments as subtitles: any player shows the labels) and
``<stem>_timeline.png`` (:func:`~dna_video.analysis.plotting.timeline_figure`), each atomically.
"""

from __future__ import annotations

import csv
import io
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from einops import rearrange
from torch import Tensor

from dna_video.analysis.inference import LoadedModel, _check_size, device_of
from dna_video.common.atomic import write_json, write_text
from dna_video.data.sampling import FrameSampler
from dna_video.data.transforms import EvalClipTransform
from dna_video.data.video import FrameStream, frame_size, open_stream
from dna_video.tasks.views import mean_view_probs

log = logging.getLogger(__name__)

__all__ = [
    "Stride", "parse_stride", "Windows", "plan_windows", "window_clips", "TimelineStats", "Timeline",
    "video_timeline", "smooth", "Segment", "segments_of", "windows_csv", "srt_timestamp", "srt_text",
    "TimelineFiles", "write_timeline", "describe",
]


# -- windows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stride:
    """Distance between window starts: ``value`` seconds (``unit="s"``) or file frames (``"f"``)."""

    value: float
    unit: str = "s"

    def frames(self, fps: float) -> float:
        return self.value * fps if self.unit == "s" else self.value

    def __str__(self) -> str:
        return f"{self.value:g}{self.unit}"


def parse_stride(text: str) -> Stride:
    """``2.5`` or ``2.5s``: seconds; ``16f``: frames of the file.

    Raises:
        ValueError: anything else, or a stride not above 0.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([sf]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"stride {text!r}: give seconds (2.5 or 2.5s) or frames (16f), above 0")
    return Stride(float(match.group(1)), match.group(2) or "s")


@dataclass(frozen=True)
class Windows:
    """Where the clip window lies along one video.

    Attributes:
        num_frames: the video's frames; fps: its frame rate.
        step: file frames between a clip's sampled frames; span: frames a window covers (T x step).
        stride: file frames between window starts.
        starts: (W,) first frame position of each window (fractional: indices are floored).
        indices: (W, T) the frame indices each window samples.
    """

    num_frames: int
    fps: float
    step: float
    span: float
    stride: float
    starts: np.ndarray
    indices: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def duration_s(self) -> float:
        return self.num_frames / self.fps

    @property
    def window_s(self) -> float:
        return self.span / self.fps

    @property
    def stride_s(self) -> float:
        return self.stride / self.fps

    @property
    def start_s(self) -> np.ndarray:
        return self.starts / self.fps

    @property
    def end_s(self) -> np.ndarray:
        return np.minimum(self.starts + self.span, self.num_frames) / self.fps

    @property
    def centre_s(self) -> np.ndarray:
        return (self.start_s + self.end_s) / 2


def plan_windows(num_frames: int, fps: float, sampler: FrameSampler, stride: Stride | None = None) -> Windows:
    """The windows of a video of ``num_frames`` frames at ``fps`` (see the module's docstring).

    Raises:
        ValueError: a sampler in ``uniform`` mode (it spreads one clip over the whole video:
            there is no window to slide), or no frames.
    """
    if sampler.mode != "clip":
        raise ValueError("a timeline slides the clip window along the video: the model samples 'uniform' "
                         "(T segments over the whole video); give --sampling clip and a --sampling-rate")
    if num_frames < 1:
        raise ValueError("the video has no frames")
    step = sampler.stride(fps)
    span = step * sampler.num_frames
    if stride is None:
        frames = step * max(1, sampler.num_frames // 2)
    else:
        frames = stride.frames(fps)
    if frames <= 0:
        raise ValueError(f"stride {stride}: must be above 0")
    last = num_frames - span
    starts = np.arange(0.0, last + 1e-9, frames) if last >= 0 else np.zeros(1)
    if last > 0 and starts[-1] < last - 1e-9:
        starts = np.append(starts, last)  # the tail: one window ending at the end
    offsets = np.arange(sampler.num_frames) * step
    indices = np.floor(starts[:, None] + offsets[None]).astype(np.int64)
    if sampler.short_video == "loop":
        indices %= num_frames
    indices = np.clip(indices, 0, num_frames - 1)
    return Windows(num_frames, float(fps), step, span, frames, starts, indices)


# -- frames of each window, decoded once ---------------------------------------------------------


@dataclass
class TimelineStats:
    """What a timeline cost: frames decoded (each sampled frame once), the most frames held at
    once, windows through the network, wall seconds, and the video's seconds per wall second."""

    decoded_frames: int = 0
    unique_frames: int = 0
    peak_held_frames: int = 0
    windows: int = 0
    seconds: float = 0.0
    video_seconds: float = 0.0

    @property
    def throughput(self) -> float:
        """Seconds of video per second of wall time."""
        return self.video_seconds / self.seconds if self.seconds > 0 else float("inf")


def window_clips(stream: FrameStream, windows: Windows, prepare: Callable[[Tensor], Tensor] | None = None,
                 chunk: int = 32, stats: TimelineStats | None = None) -> Iterator[tuple[int, Tensor]]:
    """(window number, its frames (T, ...)) of each window in order, every sampled frame decoded
    once (``chunk`` frames a decoder call) and ``prepare``\\ d once ((n, C, H, W) uint8 -> (n,
    ...), e.g. the evaluation's resize, crops and normalisation); a frame is dropped once no
    later window samples it. A file whose frames stop early (damage) ends at the last complete
    window."""
    stats = stats if stats is not None else TimelineStats()
    wanted = np.unique(windows.indices)
    stats.unique_frames = int(wanted.size)
    held: dict[int, Tensor] = {}
    current = 0
    for index, frames in stream.chunks(wanted, chunk):
        stats.decoded_frames += len(index)
        batch = torch.from_numpy(frames).permute(0, 3, 1, 2)
        if prepare is not None:
            batch = prepare(batch)
        held.update(zip(index.tolist(), batch.unbind(0)))
        stats.peak_held_frames = max(stats.peak_held_frames, len(held))
        while current < len(windows) and windows.indices[current].max() <= index[-1]:
            yield current, torch.stack([held[i] for i in windows.indices[current].tolist()])
            current += 1
            if current < len(windows):  # later windows sample from here on
                first = int(windows.indices[current].min())
                for i in [i for i in held if i < first]:
                    del held[i]
    if current < len(windows):
        log.warning("%s: frames stop at %d of %d: the timeline ends at %.2f s (%d of %d windows)", stream.path,
                    stats.decoded_frames, stats.unique_frames, windows.end_s[current - 1] if current else 0.0,
                    current, len(windows))


# -- the model over the windows ------------------------------------------------------------------


@dataclass
class Timeline:
    """Class probabilities along one video.

    Attributes:
        path: the video.
        windows: where the windows lie (all of them; ``probs`` may stop short of a damaged end).
        probs: (W, K) probabilities of each window (its spatial views combined).
        class_names: names in label order.
        stats: decoding and timing (:class:`TimelineStats`).
    """

    path: str
    windows: Windows
    probs: Tensor
    class_names: list[str]
    stats: TimelineStats = field(default_factory=TimelineStats)

    @property
    def count(self) -> int:
        """Windows with probabilities."""
        return len(self.probs)


@torch.no_grad()
def video_timeline(model: LoadedModel, path: str, stride: Stride | None = None, device: str | None = None,
                   views_per_pass: int = 32, decode_chunk: int = 32) -> Timeline:
    """Slide ``model``'s clip window along the video at ``path`` (see the module's docstring):
    probabilities of every window, the evaluation's crops of each combined.

    Raises:
        VideoDecodeError: the file cannot be decoded.
        VideoTooSmallError: a side below the network's patch size.
        ValueError: the model samples ``uniform`` clips.
    """
    settings = model.settings
    min_side = model.net.patch_size
    if min_side > 1:
        _check_size(path, *frame_size(path), min_side)
    start = time.perf_counter()
    target = device_of(device)
    net = model.net.to(target).eval()
    transform = EvalClipTransform(settings.crop_size, settings.num_crops, settings.mean, settings.std)
    per_pass = max(1, views_per_pass // settings.num_crops)
    stats = TimelineStats()
    probs: list[Tensor] = []
    batch: list[Tensor] = []

    def prepare(frames: Tensor) -> Tensor:
        """(n, C, H, W) uint8 -> (n, crops, C, crop, crop): each frame resized, cropped and
        normalised once, as evaluation does a clip's (the same steps, frame by frame)."""
        if min_side > 1:
            _check_size(path, *frames.shape[-2:], min_side)
        return rearrange(transform(frames), "s c t h w -> t s c h w")

    def run() -> None:
        views = torch.stack(batch).to(target)  # (B, crops, C, T, h, w)
        logits = net(views.flatten(0, 1)).unflatten(0, views.shape[:2]).float()
        probs.append(mean_view_probs(logits, model.aggregate).cpu())
        batch.clear()

    with open_stream(path, settings.decoder) as stream:
        windows = plan_windows(stream.num_frames, stream.fps, settings.sampler, stride)
        if windows.span > windows.num_frames:
            log.warning("%s: %d frames, shorter than one window (%.0f frames): one window, frames repeated", path,
                        windows.num_frames, windows.span)
        for number, frames in window_clips(stream, windows, prepare, decode_chunk, stats):
            batch.append(rearrange(frames, "t s c h w -> s c t h w"))
            if len(batch) == per_pass:
                run()
    if batch:
        run()
    k = model.net.num_classes
    stats.windows = sum(len(p) for p in probs)
    stats.seconds = time.perf_counter() - start
    stats.video_seconds = float(windows.end_s[stats.windows - 1]) if stats.windows else 0.0
    return Timeline(path, windows, torch.cat(probs) if probs else torch.empty(0, k), list(model.class_names), stats)


# -- smoothing and segments ----------------------------------------------------------------------


def smooth(probs: Tensor, k: int) -> Tensor:
    """Moving average of (W, K) ``probs`` over ``k`` windows centred on each (``k`` odd; an
    even ``k`` reaches one window further ahead); near the ends, over the windows there are.
    ``k`` <= 1: unchanged."""
    if k <= 1 or len(probs) < 2:
        return probs
    before, after = (k - 1) // 2, k // 2
    padded = torch.cat([torch.zeros(1, probs.shape[1], dtype=torch.float64), probs.double().cumsum(0)])
    n = len(probs)
    lo = torch.clamp(torch.arange(n) - before, min=0)
    hi = torch.clamp(torch.arange(n) + after + 1, max=n)
    return ((padded[hi] - padded[lo]) / (hi - lo)[:, None]).to(probs.dtype)


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


def segments_of(probs: Tensor, windows: Windows, class_names: Sequence[str], min_length_s: float = 0.0) -> list[Segment]:
    """Segments of the (W', K) window probabilities ``probs`` (W' <= len(windows): a damaged
    end stops early). Consecutive windows with the same top-1 class make one segment; a
    boundary lies halfway between the centres of the last window of one segment and the first
    of the next; the first segment starts at 0 and the last ends where the last window ends.

    ``min_length_s``: a segment shorter than this (the shortest first) is merged into the
    neighbour whose class is more probable over its windows, until none is or one is left.
    """
    count = len(probs)
    if count == 0:
        return []
    labels = probs.argmax(1).numpy().copy()
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


def windows_csv(windows: Windows, probs: Tensor, class_names: Sequence[str], top_k: int = 5) -> str:
    """One row per window: ``window, start_s, end_s`` then ``top1, top1_prob, top2, ...``
    (class names, most probable first)."""
    k = min(top_k, probs.shape[1]) if len(probs) else min(top_k, len(class_names))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["window", "start_s", "end_s"] + [c for i in range(1, k + 1) for c in (f"top{i}", f"top{i}_prob")])
    if len(probs):
        top = torch.topk(probs, k, dim=1)
        for w in range(len(probs)):
            ranked = [x for p, c in zip(top.values[w].tolist(), top.indices[w].tolist()) for x in (class_names[c], f"{p:.4f}")]
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
    figure = timeline_figure(windows.start_s[:count], windows.end_s[:count], probs.numpy(), names,
                             [(s.start_s, s.end_s, s.label, s.prob) for s in segments], title=title)
    save_figure(figure, paths["png"])
    return TimelineFiles(paths, segments)


def describe(timeline: Timeline) -> str:
    """One line: the video's seconds, wall seconds and the throughput."""
    stats = timeline.stats
    return (f"{Path(timeline.path).name}: {stats.video_seconds:.1f} s of video in {stats.seconds:.2f} s "
            f"({stats.throughput:.1f} s of video per second; {stats.windows} windows, "
            f"{stats.decoded_frames} frames decoded once)")
