"""How an evaluation clip is made from a file: the DataModule's test settings, as one value
(:class:`EvalSettings`) that a checkpoint carries and an exported model's metadata states.
No torch: the ONNX Runtime backend (:mod:`dna_video.prediction.onnx_backend`) reads the same settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dna_video.common.defaults import IMG_SIZE, NUM_FRAMES
from dna_video.data.sampling import FrameSampler
from dna_video.data.video import VideoFrames, check_frame_size, frame_size, read_frames

__all__ = ["EvalSettings", "read_view_frames"]


@dataclass(frozen=True)
class EvalSettings:
    """How an evaluation clip is made from a file: the DataModule's test settings."""

    num_frames: int = NUM_FRAMES
    sampling_rate: int = 32
    target_fps: float | None = 30.0
    sampling: str = "clip"
    short_video: str = "clamp"
    crop_size: int = IMG_SIZE
    mean: tuple[float, ...] = (0.45, 0.45, 0.45)
    std: tuple[float, ...] = (0.225, 0.225, 0.225)
    num_clips: int = 1
    num_crops: int = 3
    decoder: str = "decord"  # decord, pyav or torchcodec (dna_video.data.decoders)

    @property
    def sampler(self) -> FrameSampler:
        return FrameSampler(self.num_frames, self.sampling_rate, self.target_fps, self.sampling, self.short_video)

    @classmethod
    def from_fields(cls, data: dict[str, Any]) -> "EvalSettings":
        """The settings of the fields ``data`` names (other keys ignored; the rest default)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key in ("mean", "std"):
            if key in values:
                values[key] = tuple(float(x) for x in values[key])
        return cls(**values)

    def replace(self, **overrides: Any) -> "EvalSettings":
        """A copy with the given fields changed; ``None`` values leave a field as it is."""
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})



def read_view_frames(path: str, settings: EvalSettings, min_side: int = 0) -> VideoFrames:
    """The frames of every evaluation clip of ``path`` ((num_clips * T, H, W, 3) uint8, clip
    major), as the torch and the ONNX predict both read them. ``min_side``: refuse a video with
    a side below it, checked on the header's size before decoding and on the decoded frames
    (:class:`~dna_video.data.video.VideoTooSmallError`)."""
    if min_side > 1:
        check_frame_size(path, *frame_size(path), min_side)
    sampler = settings.sampler
    decoded = read_frames(path, lambda n, fps: sampler.view_indices(n, fps, settings.num_clips), settings.decoder)
    if min_side > 1:
        check_frame_size(path, *decoded.frames.shape[1:3], min_side)
    return decoded
