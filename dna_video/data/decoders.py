"""Video decoders behind one small interface: a name -> :class:`VideoReader` registry.

* ``decord`` (the default): decord 0.6's ``VideoReader``, one thread. Where decord does not
  import (no wheel for the platform, e.g. macOS on ARM), ``decord`` means PyAV, said once per
  process in one info line (:func:`resolve_decoder`).
* ``pyav``: PyAV (FFmpeg bundled in its wheel), exact frame indices: see :class:`PyAVReader`.
* ``torchcodec``: torchcodec's ``VideoDecoder`` in exact seek mode, one FFmpeg thread; an
  optional extra (``pip install "dna-video[torchcodec]"``) that needs FFmpeg's shared
  libraries on the system (4 to 8, e.g. Debian's ``libavcodec59``); without them choosing it
  stops with :class:`DecoderUnavailableError` saying so.

Frame ``i`` is the i-th frame in presentation order for every decoder. A reader is opened
per file and call (never kept on a Dataset: decord's hangs forked workers) and imports its
library only then, so ``import dna_video.data`` needs none of them. Readers raise their
library's own errors; :mod:`.video` turns them into :class:`~.video.VideoDecodeError` naming
the file.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np

from dna_video.common.install import install_extra

log = logging.getLogger(__name__)

__all__ = [
    "Decoder", "DECODERS", "DecoderUnavailableError", "VideoReader", "DecordReader", "PyAVReader",
    "TorchcodecReader", "READERS", "decoder_problem", "resolve_decoder", "open_reader",
]

Decoder = Literal["decord", "pyav", "torchcodec"]
DECODERS: tuple[str, ...] = get_args(Decoder)


class DecoderUnavailableError(ValueError):
    """The chosen decoder cannot run here (not installed, or its native libraries do not load)."""


class VideoReader:
    """One open video file.

    Attributes:
        num_frames: frames the decoder reports (from the container's index or a scan).
        fps: the stream's average frame rate.
    """

    name: str
    num_frames: int
    fps: float

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the frames."""
        return tuple(self.get([0]).shape[1:3])

    def get(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """uint8 (T, H, W, 3) RGB frames of ``indices`` in the order given (unsorted and
        repeated indices allowed; each distinct frame is decoded once, in increasing order)."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.num_frames):
            raise IndexError(f"frame indices must lie in [0, {self.num_frames}), "
                             f"got {indices.min()}..{indices.max()}")
        unique, inverse = np.unique(indices, return_inverse=True)
        frames = self._decode(unique)
        if frames.shape[0] != unique.size:
            raise RuntimeError(f"asked for {unique.size} frames, got {frames.shape[0]}")
        return frames[inverse]

    def _decode(self, indices: np.ndarray) -> np.ndarray:
        """(len(indices), H, W, 3) uint8 for sorted, distinct, in-range ``indices``."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> "VideoReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DecordReader(VideoReader):
    """decord's reader, one decoding thread (its default of 0 uses every core per reader)."""

    name = "decord"

    def __init__(self, path: str) -> None:
        import decord  # the ctypes library loads once per process

        self._vr = decord.VideoReader(path, ctx=decord.cpu(0), num_threads=1)
        self.num_frames = len(self._vr)
        self.fps = float(self._vr.get_avg_fps())

    def _decode(self, indices: np.ndarray) -> np.ndarray:
        return self._vr.get_batch(indices.tolist()).asnumpy()

    def close(self) -> None:
        self._vr = None


class PyAVReader(VideoReader):
    """PyAV with exact frame indices, valid for variable frame rates and B-frames.

    At open, the video packets are read (not decoded) once per file and process, giving every
    frame's presentation timestamp (PTS): frame i is the i-th smallest PTS, keyframes are the
    packets flagged so, and packets flagged for discarding (before an mp4 edit list's start)
    are left out. A wanted frame is reached by seeking to the last keyframe at or before it
    and decoding forward, matching decoded frames by PTS (never by time x fps, which is wrong
    for variable-rate files); frames of one GOP share one seek. A stream without PTS on its
    packets (some raw or AVI streams) is decoded in order from the start instead.
    """

    name = "PyAV"

    def __init__(self, path: str) -> None:
        import av

        self._container = av.open(path)
        try:
            if not self._container.streams.video:
                raise ValueError("no video stream")
            self._stream = stream = self._container.streams.video[0]
            stream.codec_context.thread_count = 1
            self._pts, self._keys, self._in_order = _frame_table(path, self._container, stream)
            self.num_frames = int(self._pts.size)
            rate = stream.average_rate or stream.guessed_rate
            if rate:
                self.fps = float(rate)
            elif stream.duration and stream.time_base and self.num_frames:
                self.fps = self.num_frames / float(stream.duration * stream.time_base)
            else:
                self.fps = 30.0
            self._size = (int(stream.codec_context.height), int(stream.codec_context.width))
        except BaseException:
            self._container.close()
            raise

    @property
    def size(self) -> tuple[int, int]:
        return self._size

    def _decode(self, indices: np.ndarray) -> np.ndarray:
        if self._in_order:
            return self._decode_in_order(indices)
        out: list[np.ndarray] = []
        frames = None  # the decoded frames since the last seek
        position = -1  # the index of the last of them
        for i in indices.tolist():
            target = int(self._pts[i])
            key = int(np.searchsorted(self._keys, i, side="right")) - 1  # the last keyframe at or before i
            if frames is None or position >= i or self._keys[key] > position:
                frames, position = self._seek(key), -1
            while position < i:
                frame = next(frames, None)
                if frame is None or frame.pts is None:
                    raise RuntimeError(f"frame {i} (pts {target}) not decoded: the stream ended or lost its "
                                       "timestamps")
                if frame.pts > target:
                    if position == -1 and key > 0:  # the seek landed past the target: one keyframe earlier
                        key -= 1
                        frames = self._seek(key)
                        continue
                    raise RuntimeError(f"frame {i} (pts {target}) not decoded: the decoder went on to pts "
                                       f"{frame.pts}")
                position = int(np.searchsorted(self._pts, frame.pts))
                if frame.pts == target:
                    out.append(frame.to_ndarray(format="rgb24"))
        return np.stack(out)

    def _seek(self, key: int):
        """Decoded frames from the ``key``-th keyframe on."""
        pts = int(self._pts[self._keys[key]])
        self._container.seek(pts, stream=self._stream, backward=True, any_frame=False)
        return self._container.decode(self._stream)

    def _decode_in_order(self, indices: np.ndarray) -> np.ndarray:
        self._container.seek(0)
        wanted, out = set(indices.tolist()), {}
        for count, frame in enumerate(self._container.decode(self._stream)):
            if count in wanted:
                out[count] = frame.to_ndarray(format="rgb24")
            if count >= indices[-1]:
                break
        return np.stack([out[i] for i in indices.tolist() if i in out])

    def close(self) -> None:
        self._container.close()


# Per process: (path, size, mtime) -> the frames' presentation timestamps in order and the
# positions of the keyframes among them, so that a file read again (by the next clip of a
# worker) is not scanned again.
_TABLES: OrderedDict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()
_TABLES_KEPT = 4096  # 8 bytes a frame: a few MB per worker for a large dataset


def _frame_table(path: str, container, stream) -> tuple[np.ndarray, np.ndarray, bool]:
    """(PTS of the frames in presentation order, positions of the keyframes, whether the
    stream lacks timestamps and must be decoded in order) from its packets, without decoding."""
    import av

    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key in _TABLES:
        _TABLES.move_to_end(key)
        return (*_TABLES[key], False)
    stamps, keyframe = [], []
    try:
        for packet in container.demux(stream):
            if packet.size == 0 or packet.is_discard:
                continue  # the demuxer's end-of-stream marker; frames before an edit list's start
            stamps.append(packet.pts)
            keyframe.append(packet.is_keyframe)
    except (av.error.FFmpegError, OSError):
        pass  # a damaged tail: the frames before it
    if not stamps or any(p is None for p in stamps):  # nothing to seek by: count in decoding order
        return np.arange(len(stamps), dtype=np.int64), np.zeros(1, dtype=np.int64), True
    pts = np.asarray(stamps, dtype=np.int64)
    order = np.argsort(pts, kind="stable")
    keys = np.flatnonzero(np.asarray(keyframe)[order])
    if keys.size == 0 or keys[0] != 0:
        keys = np.concatenate([[0], keys])  # decoding starts at the first frame whatever its flag
    _TABLES[key] = (pts[order], keys)
    while len(_TABLES) > _TABLES_KEPT:
        _TABLES.popitem(last=False)
    return pts[order], keys, False


class TorchcodecReader(VideoReader):
    """torchcodec's ``VideoDecoder``: exact seek mode (it scans the file once at open), one
    FFmpeg thread, frames as (T, H, W, 3)."""

    name = "torchcodec"

    def __init__(self, path: str) -> None:
        _require_torchcodec()
        from torchcodec.decoders import VideoDecoder

        self._decoder = VideoDecoder(path, dimension_order="NHWC", num_ffmpeg_threads=1, seek_mode="exact",
                                     device="cpu")
        meta = self._decoder.metadata
        self.num_frames = int(meta.num_frames or 0)
        self.fps = float(meta.average_fps or 0.0)
        self._size = (int(meta.height), int(meta.width))

    @property
    def size(self) -> tuple[int, int]:
        return self._size

    def _decode(self, indices: np.ndarray) -> np.ndarray:
        return self._decoder.get_frames_at(indices.tolist()).data.numpy()

    def close(self) -> None:
        self._decoder = None


READERS: dict[str, type[VideoReader]] = {
    "decord": DecordReader, "pyav": PyAVReader, "torchcodec": TorchcodecReader,
}


def _require_torchcodec() -> None:
    try:
        import torchcodec
    except ImportError as exc:
        raise DecoderUnavailableError(
            f"decoder 'torchcodec': torchcodec is not installed ({exc}); {install_extra('torchcodec')} "
            "(it also needs FFmpeg's shared libraries, e.g. apt install ffmpeg), "
            "or choose decord or pyav"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - a build for another torch fails in many ways
        raise DecoderUnavailableError(
            f"decoder 'torchcodec': torchcodec does not load ({type(exc).__name__}: {exc}); choose decord or pyav"
        ) from exc
    if getattr(torchcodec, "ffmpeg_major_version", None) is None:
        raise DecoderUnavailableError(
            "decoder 'torchcodec': torchcodec cannot load FFmpeg: it needs FFmpeg's shared libraries "
            "(libavcodec, libavformat, libavutil... of FFmpeg 4 to 8) on the library path, e.g. apt install "
            "ffmpeg; or choose decord or pyav"
        )


_PROBLEMS: dict[str, str | None] = {}


def decoder_problem(decoder: str) -> str | None:
    """Why ``decoder`` cannot run in this process (None: it can); checked once per process."""
    if decoder not in READERS:
        raise ValueError(f"decoder {decoder!r}: choose one of {', '.join(DECODERS)}")
    if decoder not in _PROBLEMS:
        try:
            if decoder == "decord":
                import decord  # noqa: F401
            elif decoder == "pyav":
                import av  # noqa: F401
            else:
                _require_torchcodec()
            _PROBLEMS[decoder] = None
        except DecoderUnavailableError as exc:
            _PROBLEMS[decoder] = str(exc)
        except (ImportError, OSError) as exc:
            _PROBLEMS[decoder] = f"decoder {decoder!r}: {decoder} does not import here ({exc})"
    return _PROBLEMS[decoder]


_said_fallback = False


def resolve_decoder(decoder: str = "decord") -> str:
    """The decoder that reads for the choice ``decoder``: itself, or ``pyav`` for ``decord``
    where decord does not import (one info line per process says so).

    Raises:
        DecoderUnavailableError: ``pyav`` or ``torchcodec`` chosen and not usable here.
        ValueError: not a decoder's name.
    """
    global _said_fallback
    problem = decoder_problem(decoder)
    if problem is None:
        return decoder
    if decoder == "decord":
        if not _said_fallback:
            _said_fallback = True
            log.info("decord is not available here (%s): decoding videos with PyAV",
                     problem.rpartition("(")[2].rstrip(")"))
        return resolve_decoder("pyav")
    raise DecoderUnavailableError(problem)


def open_reader(path: str, decoder: str = "decord") -> VideoReader:
    """An open reader of ``path`` by ``decoder`` (see :func:`resolve_decoder`); the library's
    own error when the file cannot be opened."""
    return READERS[resolve_decoder(decoder)](path)
