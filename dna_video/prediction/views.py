"""A video's evaluation views, in numpy: the frames a checkpoint's evaluation samples, each
resized, cropped and normalised, laid out as the model's input.

The steps (what :class:`~dna_video.data.transforms.EvalClipTransform` does with torchvision):

1. Resize each frame so its short side is the crop size (the long side ``int(crop x long /
   short)``, as torchvision computes it), bilinear with antialiasing when shrinking: Pillow's
   resize, whose filter torchvision's ``antialias=True`` reproduces. The two round differently
   in places: pixels differ by at most 1 level of 255 (measured: ``tests/test_onnx_runtime.py``).
2. 1 crop (the centre, torchvision's ``center_crop`` rounding) or 3 crops (start, centre and end
   of the long side).
3. Scale to [0, 1] (x / 255), subtract the mean and divide by the std, per channel, in float32.

Frames come as the decoders give them, (n, H, W, 3) uint8 RGB. A frame's views do not depend on
the other frames of its clip, so a backend prepares frames one batch at a time
(:meth:`~dna_video.prediction.backend.Backend.prepare`: these steps for ONNX Runtime,
torchvision's for a checkpoint, whose probabilities stay those of its evaluation);
:func:`load_views` lays the prepared frames out as clips x crops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from dna_video.data.eval_settings import EvalSettings, read_view_frames
from dna_video.data.sampling import short_videos_note

log = logging.getLogger(__name__)

__all__ = [
    "resized_size", "resize_short_side", "crop_boxes", "frame_views", "clip_views", "VideoViews", "load_views",
    "read_views",
]

#: (n, H, W, 3) uint8 frames -> (n, crops, 3, crop, crop) float32 views of each frame.
Prepare = Callable[[np.ndarray], np.ndarray]


def resized_size(height: int, width: int, size: int) -> tuple[int, int]:
    """(height, width) with the short side ``size`` and the long side ``int(size x long /
    short)`` (torchvision's rule for ``Resize(size)``)."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(size * long / short)
    return (new_long, size) if width <= height else (size, new_long)


def resize_short_side(frames: np.ndarray, size: int) -> np.ndarray:
    """(n, H, W, 3) uint8 -> (n, h, w, 3) uint8 with the short side ``size`` (bilinear,
    antialiased when shrinking; unchanged when already that size)."""
    height, width = frames.shape[1:3]
    new_height, new_width = resized_size(height, width, size)
    if (new_height, new_width) == (height, width):
        return frames
    out = np.empty((len(frames), new_height, new_width, frames.shape[3]), np.uint8)
    for i, frame in enumerate(frames):
        out[i] = np.asarray(Image.fromarray(frame).resize((new_width, new_height), Image.Resampling.BILINEAR))
    return out


def crop_boxes(height: int, width: int, size: int, num_crops: int) -> list[tuple[int, int]]:
    """(top, left) of each square crop of ``size``: 1 = the centre; 3 = start, centre and end of
    the long side (as :func:`dna_video.data.transforms.spatial_crops`)."""
    if num_crops == 1:
        # torchvision's center_crop rounds half to even (Python's round).
        return [(int(round((height - size) / 2.0)), int(round((width - size) / 2.0)))]
    if num_crops != 3:
        raise ValueError(f"num_crops must be 1 or 3, got {num_crops}")
    if width >= height:
        return [((height - size) // 2, (width - size) * k // 2) for k in range(3)]
    return [((height - size) * k // 2, (width - size) // 2) for k in range(3)]


def frame_views(frames: np.ndarray, crop_size: int, num_crops: int, mean: Sequence[float],
                std: Sequence[float]) -> np.ndarray:
    """(n, H, W, 3) uint8 -> (n, crops, 3, crop, crop) float32: each frame resized, cropped and
    normalised (a frame's views do not depend on the other frames of its clip)."""
    resized = resize_short_side(frames, crop_size)
    height, width = resized.shape[1:3]
    crops = np.stack([resized[:, top:top + crop_size, left:left + crop_size]
                      for top, left in crop_boxes(height, width, crop_size, num_crops)], axis=1)
    scaled = crops.astype(np.float32) * np.float32(1.0 / 255)
    normalised = (scaled - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(normalised.transpose(0, 1, 4, 2, 3))  # n crops h w c -> n crops c h w


def clip_views(frames: np.ndarray, crop_size: int, num_crops: int, mean: Sequence[float],
               std: Sequence[float]) -> np.ndarray:
    """One clip (T, H, W, 3) uint8 -> its views (crops, 3, T, crop, crop) float32, the model's
    input layout (what ``EvalClipTransform`` returns)."""
    views = frame_views(frames, crop_size, num_crops, mean, std)
    return np.ascontiguousarray(views.transpose(1, 2, 0, 3, 4))  # t crops c h w -> crops c t h w


@dataclass
class VideoViews:
    """The evaluation views of one video and its length against the clip's."""

    views: np.ndarray  # (V, 3, T, crop, crop) float32, clip-major (clip 0's crops, then clip 1's...)
    num_frames: int  # the file's decodable frames
    frames_needed: int  # fewest frames for clips without repeated frames

    @property
    def short(self) -> bool:
        """Shorter than the clip: sampled with frames repeated (``short_video``)."""
        return self.num_frames < self.frames_needed


def load_views(path: str, settings: EvalSettings, min_side: int = 0, prepare: Prepare | None = None) -> VideoViews:
    """Every evaluation view of one video file (``num_clips`` clips x ``num_crops`` crops),
    clip-major like the test loader's (:class:`~dna_video.data.dataset.VideoClipDataset`), with
    its frame count. ``prepare``: a backend's frame preparation (default: :func:`frame_views`
    of ``settings``); ``min_side``: refuse a video with a side below it (the network's patch
    size), checked on the header's size before decoding and on the decoded frames.

    Raises:
        VideoDecodeError: the file cannot be decoded (the message names it and what it is).
        VideoTooSmallError: a side below ``min_side``.
        ValueError: a video without frames.
    """
    if prepare is None:
        def prepare(frames: np.ndarray) -> np.ndarray:
            return frame_views(frames, settings.crop_size, settings.num_crops, settings.mean, settings.std)

    decoded = read_view_frames(path, settings, min_side)
    per_frame = np.asarray(prepare(decoded.frames))  # (clips x T, crops, 3, crop, crop)
    clips = per_frame.reshape(settings.num_clips, settings.num_frames, *per_frame.shape[1:])
    views = clips.transpose(0, 2, 3, 1, 4, 5).reshape(-1, per_frame.shape[2], settings.num_frames,
                                                      *per_frame.shape[3:])  # (k s) c t h w
    return VideoViews(np.ascontiguousarray(views), decoded.num_frames, settings.sampler.frames_needed(decoded.fps))


def read_views(path: str, settings: EvalSettings, min_side: int = 0, prepare: Prepare | None = None) -> np.ndarray:
    """The views of :func:`load_views` (V, 3, T, crop, crop); a video shorter than the clip is
    answered with a warning that says so.

    Raises:
        VideoDecodeError: the file cannot be decoded (the message names it and what it is).
        VideoTooSmallError: a side below ``min_side``.
    """
    loaded = load_views(path, settings, min_side, prepare)
    if loaded.short:
        log.warning("%s", short_videos_note([(path, loaded.num_frames, loaded.frames_needed)]))
    return loaded.views
