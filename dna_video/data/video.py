"""Decoding only the frames a clip needs, one reader per call, by the chosen decoder
(decord by default; PyAV or torchcodec: :mod:`.decoders`).

The reader is opened inside the call (never kept on a Dataset): a decord reader created
before DataLoader workers fork hangs them, and cannot be pickled for spawn. One decoding
thread per reader (decord's default of 0 means every core, which oversubscribes with
several workers).

Some files report more frames than can be decoded (a damaged or partly written tail):
the decoder then fails on the frames past the damage, and with decord not reliably (its
threaded decoder reads ahead, so even an early frame can fail). For such a file
:func:`read_frames` counts the decodable frames once with PyAV, which decodes packet by
packet and stops at the first error, remembers the count for the process, and samples within
those frames, decoding them with PyAV. Files that cannot be opened or hold no decodable
frame raise :class:`VideoDecodeError` naming the file and saying what it is in plain words: ``empty file
(0 bytes)``; ``not a video (19 bytes, starts with 'hello...')`` when it has no video
container's signature; ``damaged or truncated mp4/mov file (N bytes): moov atom not found``
(the decoder's own reason) when it has one. What FFmpeg and decord print meanwhile is kept
off the terminal (:mod:`dna_video.data.decoder_log`).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from dna_video.data.decoder_log import decoder_messages, decoder_reason, plain_reason
from dna_video.data.decoders import DecoderUnavailableError, VideoReader, open_reader

log = logging.getLogger(__name__)

__all__ = [
    "VideoDecodeError",
    "VideoTooSmallError",
    "check_frame_size",
    "VideoFrames",
    "read_frames",
    "probe_video",
    "frame_size",
    "count_decodable_frames",
    "declared_frames",
    "write_video",
    "transcode_video",
    "FrameStream",
    "open_stream",
]


class VideoDecodeError(RuntimeError):
    """A video could not be opened or decoded. The message names the file; ``reason`` says why
    without the path (the whole message when the raiser gave no separate reason)."""

    def __init__(self, message: str, path: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.reason = message if reason is None else reason


class VideoTooSmallError(ValueError):
    """A video far below the model's geometry: a side shorter than ``min_side`` (the network's
    patch size: not one patch of real pixels). The message names the file; ``reason`` says
    its size and the minimum."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def check_frame_size(path: str, height: int, width: int, min_side: int) -> None:
    """Refuse frames of ``height`` x ``width`` with a side below ``min_side`` (0: a size the
    header does not state passes).

    Raises:
        VideoTooSmallError: naming the size and the minimum.
    """
    if 0 < min(height, width) < min_side:
        raise VideoTooSmallError(
            path, f"{width}x{height} pixels, smaller than the model's {min_side}-pixel patches "
                  f"(at least {min_side} pixels a side needed)"
        )


def _error(path: str, reason: str) -> VideoDecodeError:
    return VideoDecodeError(f"{path}: {reason}", path, reason)


@dataclass
class VideoFrames:
    """Decoded frames (N, H, W, C) uint8 for the requested ``indices``, plus file facts."""

    frames: np.ndarray
    num_frames: int  # frames the indices were drawn from: the decodable ones
    fps: float
    reported: int  # frames decord reports (more than ``num_frames`` for a damaged file)
    decoded_by_pyav: bool = False  # decord failed on this file: PyAV counted and decoded it


# ------------------------------------------------------------- what a refused file is

# The first bytes of the containers FFmpeg reads video from. They only word the error of a
# file the decoder refused: a file without any of them is "not a video", one with a signature
# is a damaged or truncated video. (No file is refused for its signature alone.)
_SIGNATURES = (
    (b"RIFF", "avi"),  # with "AVI " at byte 8, checked below
    (b"\x1a\x45\xdf\xa3", "mkv/webm"),
    (b"\x00\x00\x01\xba", "mpeg-ps"),
    (b"\x00\x00\x01\xb3", "mpeg"),
    (b"\x00\x00\x00\x01", "h264/hevc stream"),
    (b"FLV\x01", "flv"),
    (b"\x30\x26\xb2\x75\x8e\x66\xcf\x11", "asf/wmv"),
    (b"OggS", "ogg"),
    (b"DKIF", "ivf"),
    (b"YUV4MPEG2", "y4m"),
    (b"GIF8", "gif"),
    (b".RMF", "realmedia"),
    (b"\x06\x0e\x2b\x34", "mxf"),
)
_MP4_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot")


def _container(head: bytes) -> str | None:
    """The video container whose signature ``head`` (a file's first bytes) starts with."""
    if head[4:8] in _MP4_BOXES:
        return "mp4/mov"
    for magic, name in _SIGNATURES:
        if head.startswith(magic) and (name != "avi" or head[8:12] == b"AVI "):
            return name
    if len(head) > 188 and head[0] == head[188] == 0x47:  # MPEG-TS: a sync byte every 188
        return "mpeg-ts"
    return None


def _shown(head: bytes) -> str:
    """The first 16 bytes as a quoted string (text) or bytes literal (binary)."""
    start = head[:16]
    for cut in range(4):  # a multi-byte character may be cut at the end
        try:
            text = start[: len(start) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text and text.replace("\n", " ").replace("\r", " ").replace("\t", " ").isprintable():
            return repr(text)
        break
    return repr(start)


def _unreadable(path: str, problem: str) -> VideoDecodeError:
    """The error for a file the decoder refused, saying what the file is: ``empty file (0
    bytes)``, ``not a video (N bytes, starts with ...)`` (no video container's signature) or
    ``damaged or truncated <container> file (N bytes): <problem>``."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError as exc:
        return _error(path, exc.strerror or str(exc))
    if size == 0:
        return _error(path, "empty file (0 bytes)")
    kind = _container(head)
    if kind is None:
        return _error(path, f"not a video ({size} bytes, starts with {_shown(head)})")
    return _error(path, f"damaged or truncated {kind} file ({size} bytes): {problem}")


def _check_file(path: str) -> os.stat_result:
    """The file's stat; a missing or empty file raises before any decoder sees it."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _error(path, exc.strerror or str(exc)) from exc
    if st.st_size == 0:
        raise _error(path, "empty file (0 bytes)")
    return st


def _open(path: str):
    import decord  # imported lazily: the ctypes library loads once per worker

    _check_file(path)
    error: Exception | None = None
    with decoder_messages() as said:
        try:
            return decord.VideoReader(path, ctx=decord.cpu(0), num_threads=1)
        except Exception as exc:  # decord raises its own DECORDError or RuntimeError
            error = exc
    raise _unreadable(path, decoder_reason(path, said, error)) from error


def _open_reader(path: str, decoder: str = "decord") -> VideoReader:
    """``path`` opened by ``decoder`` (:mod:`.decoders`), or the error naming what it is."""
    _check_file(path)
    error: Exception | None = None
    with decoder_messages() as said:
        try:
            return open_reader(path, decoder)
        except DecoderUnavailableError:
            raise  # the decoder, not the file: stops the run
        except Exception as exc:  # decord's DECORDError, PyAV's FFmpegError, torchcodec's RuntimeError...
            error = exc
    raise _unreadable(path, decoder_reason(path, said, error)) from error


def probe_video(path: str, decoder: str = "decord") -> tuple[int, float]:
    """(frame count, fps) of a video file as ``decoder`` reports them."""
    with _open_reader(path, decoder) as reader:
        return reader.num_frames, reader.fps


def frame_size(path: str) -> tuple[int, int]:
    """(height, width) of the file's first video stream as its header states them (0, 0 when
    it states none), read with PyAV without decoding a frame."""
    import av

    _check_file(path)
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise _unreadable(path, "no video stream")
            context = container.streams.video[0].codec_context
            return int(context.height or 0), int(context.width or 0)
    except (av.error.FFmpegError, OSError) as exc:
        raise _unreadable(path, plain_reason(str(exc), path) or type(exc).__name__) from exc


# Files decord cannot decode, per process: (path, size, mtime) -> (decodable frames,
# reported frames, fps), so such a file is counted once per worker process (not at every
# sample) and later reads go straight to PyAV. Workers restart every epoch unless
# ``persistent_workers`` is set; ``prepare --transcode`` removes the problem.
_DECODABLE: dict[tuple[str, int, int], tuple[int, int, float]] = {}


def _file_key(path: str) -> tuple[str, int, int]:
    st = _check_file(path)
    return path, st.st_size, st.st_mtime_ns


def _pyav_frames(path: str, wanted: set[int] | None, stop: int | None = None):
    """Decode ``path`` in order with PyAV until the first error (or frame ``stop``):
    (frames decoded, {index: (H, W, 3) uint8 for indices in ``wanted``})."""
    import av

    kept: dict[int, np.ndarray] = {}
    count = 0
    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            for packet in container.demux(stream):
                for frame in packet.decode():
                    if wanted is not None and count in wanted:
                        kept[count] = frame.to_ndarray(format="rgb24")
                    count += 1
                    if stop is not None and count >= stop:
                        return count, kept
    except (av.error.FFmpegError, IndexError, OSError):
        pass  # the frames decoded before the damage are what the file holds
    return count, kept


def count_decodable_frames(path: str) -> int:
    """Frames of ``path`` that decode, in order, before the first decoding error (PyAV)."""
    return _pyav_frames(path, wanted=None)[0]


def declared_frames(path: str) -> int:
    """The frame count the container's header declares (0 if it declares none). A truncated
    AVI keeps its header's count while decord, lacking the index, reports fewer frames."""
    import av

    try:
        with av.open(path) as container:
            return int(container.streams.video[0].frames) if container.streams.video else 0
    except (av.error.FFmpegError, OSError):
        return 0


def read_frames(path: str, sampler, decoder: str = "decord") -> VideoFrames:
    """Open ``path`` with ``decoder`` (:mod:`.decoders`) and decode the frames chosen by
    ``sampler``.

    ``sampler(num_frames, fps)`` returns an integer array of any shape of frame indices; the
    unique indices are decoded once (sorted, so that the decoder seeks forward) and the result
    is laid out in the sampler's shape, flattened to (N, H, W, C) with N = its size. If the
    file holds fewer decodable frames than it reports, the sampler is asked again with the
    decodable count (see the module's docstring).
    """
    key = _file_key(path)
    if key not in _DECODABLE:
        with _open_reader(path, decoder) as reader:
            num_frames, fps = reader.num_frames, reader.fps
            if num_frames < 1:
                raise _unreadable(path, "no video frames")
            indices = np.asarray(sampler(num_frames, fps), dtype=np.int64)
            unique, inverse = np.unique(indices.reshape(-1), return_inverse=True)
            failure: Exception | None = None
            with decoder_messages() as said:
                try:
                    decoded = reader.get(unique)
                except Exception as exc:  # the decoder's own errors (decord: DECORDError or RuntimeError)
                    failure, decoded = exc, None
        if decoded is not None and decoded.shape[0] == unique.size:
            if said:
                log.debug("%s: the decoder said %s", path, " | ".join(said))
            return VideoFrames(frames=decoded[inverse], num_frames=num_frames, fps=fps, reported=num_frames)
        if decoded is not None:
            error = f"asked for {unique.size} frames, got {decoded.shape[0]}"
        else:
            error = decoder_reason(path, said, failure)
        decodable = count_decodable_frames(path)
        if decodable == 0:
            raise _unreadable(path, f"no frame decodes ({num_frames} reported): {error}")
        if decodable < num_frames:
            log.warning(
                "%s reports %d frames but only the first %d decode: sampling within those "
                "(re-encoding fixes it: dna-video prepare ... --transcode)",
                path, num_frames, decodable,
            )
        else:
            log.warning("%s cannot decode %s (%s); decoding it with PyAV", reader.name, path, error)
        _DECODABLE[key] = (min(decodable, num_frames), num_frames, fps)
    decodable, reported, fps = _DECODABLE[key]
    # Decoded in order by PyAV: the decoder is not reliable on this file.
    indices = np.asarray(sampler(decodable, fps), dtype=np.int64)
    unique, inverse = np.unique(indices.reshape(-1), return_inverse=True)
    count, kept = _pyav_frames(path, set(unique.tolist()), stop=int(unique.max()) + 1)
    if len(kept) != unique.size:
        raise VideoDecodeError(f"{path}: {unique.size} frames wanted below {decodable}, {len(kept)} decoded")
    frames = np.stack([kept[i] for i in unique.tolist()])[inverse]
    return VideoFrames(frames=frames, num_frames=decodable, fps=fps, reported=reported, decoded_by_pyav=True)


# ------------------------------------------------------------- a long video, in order


def _pyav_iter(path: str, wanted: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(index, (H, W, 3) uint8) of the sorted unique frame indices ``wanted``, decoded in order
    with PyAV; ends at the last wanted frame or at the first decoding error."""
    import av

    if wanted.size == 0:
        return
    position, last = 0, int(wanted[-1])
    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            count = 0
            for packet in container.demux(stream):
                for frame in packet.decode():
                    if count == int(wanted[position]):
                        yield count, frame.to_ndarray(format="rgb24")
                        position += 1
                        if count >= last:
                            return
                    count += 1
    except (av.error.FFmpegError, IndexError, OSError):
        return  # the frames decoded before the damage are what the file holds


class FrameStream:
    """One video file read front to back in chunks: what a timeline over a long video needs.

    :meth:`chunks` decodes the frames of an ascending index array in order, each index once,
    ``size`` frames per decoder call (a reader of :mod:`.decoders`), so memory holds one chunk
    whatever the video's length. A file the decoder fails on is read on with PyAV, in order,
    from the first frame it failed on to the end or the first damaged frame. ``decoded`` counts
    the frames handed out. Open with :func:`open_stream`; close (or use ``with``) when done.
    """

    def __init__(self, path: str, reader: VideoReader | None, num_frames: int, fps: float) -> None:
        self.path = path
        self.num_frames = num_frames
        self.fps = fps
        self.decoded = 0
        self._reader = reader  # None: PyAV in order (the decoder failed on this file before)

    def _batch(self, indices: np.ndarray) -> np.ndarray | None:
        """The frames of ``indices`` from the reader, or None (logged) where it fails."""
        failure: Exception | None = None
        with decoder_messages() as said:
            try:
                frames = self._reader.get(indices)
            except Exception as exc:  # the decoder's own errors (decord: DECORDError or RuntimeError)
                failure, frames = exc, None
        if frames is not None and frames.shape[0] == indices.size:
            return frames
        why = f"asked for {indices.size} frames, got {frames.shape[0]}" if frames is not None else (
            decoder_reason(self.path, said, failure))
        log.warning("%s cannot decode %s from frame %d (%s): reading on with PyAV", self._reader.name, self.path,
                    int(indices[0]), why)
        return None

    def chunks(self, indices: np.ndarray, size: int = 32) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(indices, frames (n, H, W, 3) uint8) of the ascending unique ``indices`` in order, at
        most ``size`` a chunk; fewer in all when the file ends in damage (nothing follows)."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and (np.any(np.diff(indices) <= 0) or indices[0] < 0 or indices[-1] >= self.num_frames):
            raise ValueError(f"{self.path}: frame indices must be ascending, unique and below {self.num_frames}")
        start = 0
        while start < indices.size and self._reader is not None:
            part = indices[start: start + size]
            frames = self._batch(part)
            if frames is None:
                self.close()
                break
            self.decoded += len(part)
            yield part, frames
            start += size
        got, batch = [], []
        for index, frame in _pyav_iter(self.path, indices[start:]):
            got.append(index)
            batch.append(frame)
            if len(batch) == size:
                self.decoded += size
                yield np.asarray(got), np.stack(batch)
                got, batch = [], []
        if batch:
            self.decoded += len(batch)
            yield np.asarray(got), np.stack(batch)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> "FrameStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_stream(path: str, decoder: str = "decord") -> FrameStream:
    """A :class:`FrameStream` over ``path`` read by ``decoder`` (:mod:`.decoders`): its frame
    count and rate as the decoder reports them, or as counted when the decoder failed on the
    file before (then read with PyAV); a frame rate the file does not state is taken as 30,
    with a warning.

    Raises:
        VideoDecodeError: the file cannot be opened or holds no frame.
    """
    key = _file_key(path)
    reader = _open_reader(path, decoder)
    num_frames, fps = reader.num_frames, reader.fps
    if key in _DECODABLE:
        reader.close()
        reader = None
        num_frames, _, fps = _DECODABLE[key]
    if num_frames < 1:
        if reader is not None:
            reader.close()
        raise _unreadable(path, "no video frames")
    if not math.isfinite(fps) or fps <= 0:
        log.warning("%s states no frame rate: times assume 30 fps", path)
        fps = 30.0
    return FrameStream(path, reader, num_frames, fps)


def write_video(
    path: str,
    frames: np.ndarray | Iterable[np.ndarray],
    fps: float = 30.0,
    codec: str = "libx264",
    crf: int = 18,
    gop: int = 16,
    faststart: bool = False,
    bit_rate: int | None = None,
) -> None:
    """Write (N, H, W, 3) uint8 RGB frames to a video file with PyAV.

    ``frames``: an array, or any iterable of (H, W, 3) uint8 frames (written as they come,
    so long 1080p videos need not fit in memory). ``libx264``/``h264`` write H.264
    (yuv420p, ``crf`` quality, keyframe every ``gop`` frames, no B-frames: short seeks for
    random access); ``mpeg4`` writes MPEG-4 Part 2 (the codec of many AVI files) at
    ``bit_rate`` bits/s (default: 4 bits per pixel per second). H and W must be even for
    yuv420p. ``faststart`` puts an mp4 file's index before its frames.
    """
    import av
    from fractions import Fraction

    frames = iter(frames)
    first = next(frames, None)
    if first is None or first.dtype != np.uint8 or first.ndim != 3 or first.shape[-1] != 3:
        what = "no frames" if first is None else f"a first frame {first.shape} {first.dtype}"
        raise ValueError(f"frames must be (H, W, 3) uint8 images, got {what}")
    h, w, _ = first.shape
    options = {"movflags": "+faststart"} if faststart else {}
    with av.open(path, mode="w", options=options) as container:
        stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height = w, h
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        stream.codec_context.max_b_frames = 0
        # A generated dataset must be a function of its options: x264 wrote different bytes for
        # the same frames from run to run when processes ran side by side (decoded pixels up to
        # 16 levels apart), with its threads and even with one thread while its macroblock-tree
        # lookahead was on. One thread and no lookahead measured identical over 24 concurrent
        # encodes of 40 videos; files are written in parallel processes instead.
        stream.codec_context.thread_count = 1
        if codec in ("libx264", "h264"):
            stream.codec_context.options = {"crf": str(crf), "preset": "veryfast", "threads": "1",
                                            "x264-params": "mbtree=0:rc-lookahead=0"}
        else:
            stream.codec_context.bit_rate = bit_rate or max(200_000, 4 * w * h * int(fps))
        for frame in itertools.chain([first], frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _even(x: float) -> int:
    return max(2, int(round(x / 2)) * 2)


def transcode_video(
    src: str,
    dst: str,
    short_side: int | None = 256,
    gop: int = 16,
    crf: int = 23,
    preset: str = "veryfast",
) -> tuple[int, bool]:
    """Re-encode ``src`` as H.264 mp4 at ``dst`` (PyAV, no system ffmpeg needed).

    The short side is scaled down to ``short_side`` (never up; None keeps the size; both
    sides even), a keyframe exactly every ``gop`` frames and no B-frames (a seek decodes at
    most ``gop`` frames), constant frame rate at the source's average rate, no audio, index at
    the front. One thread each for decoding and encoding: run files in parallel instead.
    Frames that decode before a damaged part are kept. Returns (frames written, whether
    the source was damaged); raises :class:`VideoDecodeError` when no frame decodes.
    """
    import av
    from fractions import Fraction

    written, damaged = 0, False
    try:
        inp = av.open(src)
    except (av.error.FFmpegError, OSError) as exc:
        raise _unreadable(src, plain_reason(str(exc), src) or type(exc).__name__) from exc
    with inp:
        if not inp.streams.video:
            raise _unreadable(src, "no video stream")
        ist = inp.streams.video[0]
        ist.codec_context.thread_count = 1
        rate = ist.average_rate or ist.guessed_rate or Fraction(30)
        rate = Fraction(rate).limit_denominator(1001)
        w, h = ist.codec_context.width, ist.codec_context.height
        scale = min(1.0, short_side / min(w, h)) if short_side else 1.0
        ow, oh = _even(w * scale), _even(h * scale)
        with av.open(dst, mode="w", format="mp4", options={"movflags": "+faststart"}) as out:
            ost = out.add_stream("libx264", rate=rate)
            ost.width, ost.height, ost.pix_fmt = ow, oh, "yuv420p"
            ost.codec_context.gop_size = gop
            ost.codec_context.max_b_frames = 0
            # sc_threshold 0: keyframes exactly every `gop` frames (no extra ones at scene cuts).
            ost.codec_context.options = {"crf": str(crf), "preset": preset, "threads": "1", "sc_threshold": "0"}
            try:
                for packet in inp.demux(ist):
                    for frame in packet.decode():
                        frame = frame.reformat(width=ow, height=oh, format="yuv420p", interpolation="AREA")
                        frame.pts, frame.time_base = written, Fraction(1) / rate
                        # The source's picture type would force x264's (an all-intra source
                        # would stay all-intra): let the encoder choose by the GOP.
                        frame.pict_type = av.video.frame.PictureType.NONE
                        for out_packet in ost.encode(frame):
                            out.mux(out_packet)
                        written += 1
            except (av.error.FFmpegError, IndexError) as exc:
                damaged = True
                log.warning("%s: decoding stopped after %d frames (%s)", src, written, exc)
            for out_packet in ost.encode():
                out.mux(out_packet)
    if written == 0:
        raise _error(src, "no frame decodes")
    return written, damaged
