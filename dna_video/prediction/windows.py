"""Where the clip window lies along a video, and each window's frames decoded once.

A clip is T frames ``s`` file frames apart (the sampling rate at the target frame rate:
:meth:`~dna_video.data.sampling.FrameSampler.stride`), so a window covers T x s frames (T x
sampling rate / target fps seconds). Windows start at 0, stride, 2 x stride... of the file's
frames, and one more ends at the video's end when a tail is left over; a video shorter than one
window has one window, its frames repeated as in evaluation. The default stride is half the
window rounded down to whole sampling steps: windows then sample the same frames where they
overlap (:func:`plan_windows`).

Decoding (:func:`window_clips`). The sampled frames of all windows are decoded once, in order,
in chunks (:class:`~dna_video.data.video.FrameStream`); each frame is prepared (resized, cropped
and normalised: a backend's :meth:`~dna_video.prediction.backend.Backend.prepare`) when it
arrives and kept only until the last window that samples it has gone through the network.
Memory holds one window's frames plus one chunk, whatever the video's length.

The timeline over these windows: :mod:`.timeline`; the same plan laid out as a live source's
frames arrive: :mod:`.stream`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from dna_video.data.sampling import FrameSampler
from dna_video.data.video import FrameStream

log = logging.getLogger(__name__)

__all__ = ["Stride", "parse_stride", "Windows", "plan_windows", "TimelineStats", "window_clips"]


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


def window_clips(stream: FrameStream, windows: Windows, prepare: Callable[[np.ndarray], np.ndarray] | None = None,
                 chunk: int = 32, stats: TimelineStats | None = None) -> Iterator[tuple[int, list[np.ndarray]]]:
    """(window number, its T frames in order) of each window in order, every sampled frame
    decoded once (``chunk`` frames a decoder call) and ``prepare``\\ d once ((n, H, W, 3) uint8
    -> n prepared frames, e.g. a backend's resize, crops and normalisation); a frame is dropped
    once no later window samples it. A file whose frames stop early (damage) ends at the last
    complete window."""
    stats = stats if stats is not None else TimelineStats()
    wanted = np.unique(windows.indices)
    stats.unique_frames = int(wanted.size)
    held: dict[int, np.ndarray] = {}
    current = 0
    for index, frames in stream.chunks(wanted, chunk):
        stats.decoded_frames += len(index)
        batch = prepare(frames) if prepare is not None else frames
        held.update(zip(index.tolist(), batch))
        stats.peak_held_frames = max(stats.peak_held_frames, len(held))
        while current < len(windows) and windows.indices[current].max() <= index[-1]:
            yield current, [held[i] for i in windows.indices[current].tolist()]
            current += 1
            if current < len(windows):  # later windows sample from here on
                first = int(windows.indices[current].min())
                for i in [i for i in held if i < first]:
                    del held[i]
    if current < len(windows):
        log.warning("%s: frames stop at %d of %d: the timeline ends at %.2f s (%d of %d windows)", stream.path,
                    stats.decoded_frames, stats.unique_frames, windows.end_s[current - 1] if current else 0.0,
                    current, len(windows))
