"""Which frames of a video make a clip: pure functions of (frame count, fps, options).

Our own sampler rather than pytorchvideo's clip samplers: those work in seconds on a
decoder's duration (which decord, AVI headers and variable-rate files report
inconsistently) and return one clip per call, whereas here the sampler must work in frame
indices (what decord's ``get_batch`` takes), return all test views of a video at once so that
the video is decoded once, and handle short videos by clamping or looping.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from dna_video.common.defaults import NUM_FRAMES

__all__ = ["FrameSampler", "short_videos_note"]


@dataclass(frozen=True)
class FrameSampler:
    """Frame-index sampling for a clip of ``num_frames`` frames.

    Args:
        num_frames: frames per clip (T).
        sampling_rate: interval between sampled frames, counted at ``target_fps``.
        target_fps: frame rate the interval refers to; the stride in the file's own frames is
            ``sampling_rate * file_fps / target_fps``. None: use the file's frames as they are.
        mode: ``clip``: T frames ``sampling_rate`` apart (TimeSformer, SlowFast); ``uniform``:
            T segments spread over the whole video, one frame each (TSN-style).
        short_video: what to do when the clip is longer than the video: ``clamp`` repeats the
            last frame, ``loop`` wraps around to the start.
    """

    num_frames: int = NUM_FRAMES
    sampling_rate: int = 32
    target_fps: float | None = 30.0
    mode: Literal["clip", "uniform"] = "clip"
    short_video: Literal["clamp", "loop"] = "clamp"

    def __post_init__(self) -> None:
        if self.num_frames < 1 or self.sampling_rate < 1:
            raise ValueError("num_frames and sampling_rate must be >= 1")
        if self.mode not in ("clip", "uniform"):
            raise ValueError(f"unknown sampling mode {self.mode!r}: use 'clip' or 'uniform'")
        if self.short_video not in ("clamp", "loop"):
            raise ValueError(f"unknown short_video {self.short_video!r}: use 'clamp' or 'loop'")

    def stride(self, fps: float) -> float:
        """Distance between sampled frames, in the file's own frames."""
        if self.target_fps is None or fps is None or not math.isfinite(fps) or fps <= 0:  # unknown rate: count frames
            return float(self.sampling_rate)
        return self.sampling_rate * fps / self.target_fps

    def frames_needed(self, fps: float) -> int:
        """Fewest frames a video of frame rate ``fps`` needs for clips without repeated frames.

        A shorter video is still sampled (``short_video``: the last frame repeated, or the
        clip wrapped to the start); :func:`short_videos_note` words the warning that counts
        them. ``clip`` mode: the span of T frames a stride apart, floor(stride x (T - 1)) + 1
        (past it no index is clamped); ``uniform`` mode: T frames.
        """
        if self.mode == "uniform":
            return self.num_frames
        return int(np.floor(self.stride(fps) * (self.num_frames - 1))) + 1

    def _finish(self, positions: np.ndarray, num_video_frames: int) -> np.ndarray:
        idx = np.floor(positions).astype(np.int64)
        if self.short_video == "loop":
            return idx % num_video_frames
        return np.clip(idx, 0, num_video_frames - 1)

    def train_indices(self, num_video_frames: int, fps: float, rng: np.random.Generator) -> np.ndarray:
        """One clip at a random position: (T,) frame indices."""
        n = _check_length(num_video_frames)
        if self.mode == "uniform":
            seg = n / self.num_frames
            return self._finish(np.arange(self.num_frames) * seg + rng.uniform(0, seg, self.num_frames), n)
        stride = self.stride(fps)
        start = rng.uniform(0, max(n - stride * self.num_frames, 0.0))
        return self._finish(start + np.arange(self.num_frames) * stride, n)

    def view_indices(self, num_video_frames: int, fps: float, num_clips: int) -> np.ndarray:
        """``num_clips`` evenly spaced clips, deterministic: (num_clips, T) frame indices.

        One clip is centred; several span the video from its first to its last possible
        start. In ``uniform`` mode the clips take the middle of each segment, shifted by
        k / num_clips of a segment for clip k.
        """
        n = _check_length(num_video_frames)
        t = np.arange(self.num_frames)
        if self.mode == "uniform":
            seg = n / self.num_frames
            offsets = (np.arange(num_clips) + 0.5) / num_clips * seg
            return self._finish(t[None] * seg + offsets[:, None], n)
        stride = self.stride(fps)
        delta = max(n - stride * self.num_frames, 0.0)
        starts = np.array([delta / 2]) if num_clips == 1 else np.linspace(0, delta, num_clips)
        return self._finish(starts[:, None] + t[None] * stride, n)


def _check_length(num_video_frames: int) -> int:
    if num_video_frames < 1:
        raise ValueError("the video has no frames")
    return int(num_video_frames)


def short_videos_note(videos: Sequence[tuple[str, int, int]], max_named: int = 5) -> str:
    """One line counting the videos shorter than the clip, from (path, frames, frames needed):
    ``2 videos shorter than the clip (7 frames needed): frames repeated: a.mp4 (3 frames),
    b.mp4 (5 frames)``, at most ``max_named`` named."""
    needed = sorted({n for _, _, n in videos})
    span = str(needed[0]) if len(needed) == 1 else f"{needed[0]}-{needed[-1]}"
    named = ", ".join(f"{Path(p).name} ({f} frame{'' if f == 1 else 's'})" for p, f, _ in videos[:max_named])
    if len(videos) > max_named:
        named += f" (+{len(videos) - max_named} more)"
    count = f"{len(videos)} video{'' if len(videos) == 1 else 's'}"
    return f"{count} shorter than the clip ({span} frames needed): frames repeated: {named}"
