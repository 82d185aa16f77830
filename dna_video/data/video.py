"""Decoding with decord: only the frames a clip needs, one reader per call.

The reader is opened inside the call (never kept on a Dataset): a decord reader created
before DataLoader workers fork hangs them, and cannot be pickled for spawn. One decoding
thread per reader (decord's default of 0 means every core, which oversubscribes with
several workers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["VideoDecodeError", "VideoFrames", "read_frames", "probe_video", "write_video"]


class VideoDecodeError(RuntimeError):
    """A video could not be opened or decoded. The message names the file."""


@dataclass
class VideoFrames:
    """Decoded frames (N, H, W, C) uint8 for the requested ``indices``, plus file facts."""

    frames: np.ndarray
    num_frames: int
    fps: float


def _open(path: str):
    import decord  # imported lazily: the ctypes library loads once per worker

    try:
        return decord.VideoReader(path, ctx=decord.cpu(0), num_threads=1)
    except Exception as exc:  # decord raises its own DECORDError or RuntimeError
        raise VideoDecodeError(f"cannot open video {path}: {exc}") from exc


def probe_video(path: str) -> tuple[int, float]:
    """(frame count, fps) of a video file as decord reports them."""
    vr = _open(path)
    return len(vr), float(vr.get_avg_fps())


def read_frames(path: str, sampler) -> VideoFrames:
    """Open ``path`` and decode the frames chosen by ``sampler``.

    ``sampler(num_frames, fps)`` returns an integer array of any shape of frame indices; the
    unique indices are decoded once (sorted, so that decord seeks forward) and the result
    is laid out in the sampler's shape, flattened to (N, H, W, C) with N = its size.
    """
    vr = _open(path)
    num_frames, fps = len(vr), float(vr.get_avg_fps())
    if num_frames < 1:
        raise VideoDecodeError(f"video {path} reports no frames")
    indices = np.asarray(sampler(num_frames, fps), dtype=np.int64)
    unique, inverse = np.unique(indices.reshape(-1), return_inverse=True)
    try:
        decoded = vr.get_batch(unique.tolist()).asnumpy()
    except Exception as exc:
        raise VideoDecodeError(
            f"cannot decode frames {unique.min()}..{unique.max()} of {path} "
            f"({num_frames} frames reported): {exc}"
        ) from exc
    if decoded.shape[0] != unique.size:
        raise VideoDecodeError(f"{path}: asked for {unique.size} frames, got {decoded.shape[0]}")
    return VideoFrames(frames=decoded[inverse], num_frames=num_frames, fps=fps)


def write_video(
    path: str,
    frames: np.ndarray,
    fps: float = 30.0,
    codec: str = "libx264",
    crf: int = 18,
    gop: int = 16,
) -> None:
    """Write (N, H, W, 3) uint8 RGB frames to a video file with PyAV.

    ``libx264``/``h264`` write H.264 (yuv420p, ``crf`` quality, keyframe every ``gop``
    frames, no B-frames: short seeks for random access); ``mpeg4`` writes MPEG-4 Part 2
    (the codec of many AVI files). H and W must be even for yuv420p.
    """
    import av
    from fractions import Fraction

    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be (N, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    n, h, w, _ = frames.shape
    with av.open(path, mode="w") as container:
        stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height = w, h
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        stream.codec_context.max_b_frames = 0
        if codec in ("libx264", "h264"):
            stream.codec_context.options = {"crf": str(crf), "preset": "veryfast"}
        else:
            stream.codec_context.bit_rate = max(200_000, 4 * w * h * int(fps))
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
