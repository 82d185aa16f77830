"""Live video: windows predicted as the frames arrive, whatever backend runs the network. numpy
and PyAV only (no torch): a checkpoint's ``predict --stream`` and an ``.onnx`` model's are this.

Source. Anything PyAV opens (:func:`open_source`): a file, an ``rtsp://`` / ``http://`` URL, a
capture device (``/dev/video0`` is opened as ``v4l2``; other devices name their FFmpeg format).
A :class:`FrameReader` thread decodes it in order, numbers the frames 0, 1, 2... and hands on
the frames some window samples. ``speed`` paces the frames by their timestamps (1: real time,
2: twice as fast; 0: as fast as they decode): a file read at speed 1 arrives as a camera's
frames would; a live source arrives at its own pace anyway.

Windows. :class:`LivePlan` is the timeline's plan (:func:`~dna_video.prediction.windows.plan_windows`:
T frames ``step`` apart, windows ``stride`` apart) laid out as the frames come: a window is
complete when its last sampled frame is in. A file states its frame count: its plan is the
file's own, the window that ends at the file's end included, so a file streamed gives the
windows (and times) of its ``--timeline``. A live source has no known end: window ``w`` starts
at frame ``w x stride``, and the frames after the last whole window are counted instead.

Ring buffer. :func:`run_stream` prepares each sampled frame once (resize, crops, normalise)
as it arrives and holds the prepared frames of one window (from the next window's first frame
on); a window goes through the network as soon as its last frame is in. Latency: from the
arrival of that frame to the window's probabilities.

Dropping. When the network is slower than the source, windows complete while it is busy. By
default the next pass takes the newest complete window: the older ones are skipped and the
sampled frames only they hold are dropped unprepared, both counted (:class:`LiveStats`);
outputs stay one per window, numbered by the plan. ``drop=False`` processes every window in
order, later and later (memory then grows with the backlog).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from dna_video.prediction.records import top_classes
from dna_video.prediction.windows import Stride, plan_windows
from dna_video.data.sampling import FrameSampler
from dna_video.data.video import VideoDecodeError, check_frame_size, probe_video

log = logging.getLogger(__name__)

__all__ = [
    "StreamSourceError", "is_local_file", "display_name", "stream_stem", "open_source", "source_rate",
    "file_frame_count", "LivePlan", "FrameReader", "LiveWindow", "LiveStats", "run_stream", "LiveCsv",
    "latency_summary", "summary_lines",
]

# A source that sends nothing for this long ends the stream (network sources; a file never waits).
READ_TIMEOUT_S = 10.0
# A rate the source does not state is taken as this (as open_stream does for files).
DEFAULT_FPS = 30.0


class StreamSourceError(RuntimeError):
    """A source PyAV cannot open, or one without a video stream; the message names it and why."""


def is_local_file(source: str) -> bool:
    """Whether ``source`` names a file here (not a URL, not a capture device)."""
    return "://" not in source and not source.startswith("/dev/") and Path(source).is_file()


def display_name(source: str) -> str:
    """``source`` as printed and recorded: a URL without its password (``rtsp://user@host/...``)."""
    if "://" not in source:
        return source
    parts = urlsplit(source)
    if parts.password is None:
        return source
    host = parts.hostname or ""
    host = f"{host}:{parts.port}" if parts.port else host
    return parts._replace(netloc=f"{parts.username}@{host}").geturl()


def stream_stem(source: str) -> str:
    """The name a source's files are given: a file's or device's stem (``kitchen``,
    ``video0``), a URL's host and path (``cam.local_live_ch1``)."""
    if "://" in source:
        parts = urlsplit(source)
        text = f"{parts.hostname or ''}{Path(parts.path).with_suffix('') if parts.path.strip('/') else ''}"
    else:
        text = Path(source).stem
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "stream"


def open_source(source: str, input_format: str | None = None, options: dict[str, str] | None = None,
                timeout_s: float = READ_TIMEOUT_S) -> Any:
    """The PyAV container of ``source`` (see the module's docstring); ``input_format``: FFmpeg's
    format (``-f``: ``v4l2``, ``avfoundation``, ``dshow``...), default ``v4l2`` for ``/dev/video*``
    and guessed otherwise; ``options``: FFmpeg's options (``rtsp_transport=tcp``,
    ``video_size=640x480``...).

    Raises:
        StreamSourceError: it cannot be opened or has no video stream (the message says why).
    """
    import av

    if input_format is None and source.startswith("/dev/video"):
        input_format = "v4l2"
    name = display_name(source)
    try:
        container = av.open(source, format=input_format, options=dict(options or {}), timeout=(timeout_s, timeout_s))
    except (av.error.FFmpegError, OSError) as exc:
        raise StreamSourceError(f"cannot open {name}: {getattr(exc, 'strerror', None) or exc}") from None
    if not container.streams.video:
        container.close()
        raise StreamSourceError(f"{name} has no video stream")
    return container


def source_rate(stream: Any) -> Fraction:
    """A PyAV video stream's frame rate: the stated average, else FFmpeg's guess, else 30."""
    for rate in (stream.average_rate, stream.guessed_rate):
        if rate and float(rate) > 0 and math.isfinite(float(rate)):
            return Fraction(rate)
    log.warning("the source states no frame rate: taken as %g fps", DEFAULT_FPS)
    return Fraction(int(DEFAULT_FPS))


def file_frame_count(source: str, container: Any) -> int | None:
    """The frames of ``source`` when it is a file here: the count its header states, else its
    packets counted (PyAV, nothing decoded); None for a URL or a device (no end known) or a
    file whose frames cannot be counted."""
    if not is_local_file(source):
        return None
    stated = int(container.streams.video[0].frames or 0)
    if stated > 0:
        return stated
    try:
        return probe_video(source, "pyav")[0] or None
    except VideoDecodeError:
        return None


# -- windows as the frames come ----------------------------------------------------------------


class LivePlan:
    """The timeline's windows of a source at ``fps`` (see the module's docstring): window ``w``
    samples frames ``floor(start + k x step)``, k < T, the numbers
    :func:`~dna_video.prediction.windows.plan_windows` gives a file. ``num_frames``: the
    source's length when it is known (a file): the file's plan, the tail window included;
    None: a live source, windows ``w x stride`` apart with no end.

    Raises:
        ValueError: a ``uniform`` sampler (no window to slide), as ``plan_windows``.
    """

    #: The first frame of a window past a file's last: above every frame index.
    BEYOND = np.iinfo(np.int64).max

    def __init__(self, sampler: FrameSampler, fps: float, stride: Stride | None = None,
                 num_frames: int | None = None) -> None:
        # A live source: the step, span and stride of the file's plan (its defaults and checks), one window's worth.
        length = num_frames or int(math.ceil(sampler.stride(fps) * sampler.num_frames)) + 1
        shape = plan_windows(length, fps, sampler, stride)
        self.fps, self.step, self.span, self.stride = float(fps), shape.step, shape.span, shape.stride
        self.offsets = np.arange(sampler.num_frames) * self.step
        self.windows = shape if num_frames else None  # a file's whole plan
        if self.windows is not None:
            # A window is complete when its last frame is in: the latest of its frames so far, in order.
            self._completes_at = np.maximum.accumulate(self.windows.indices.max(axis=1))
        self._planned = 0  # windows whose frames are in _wanted (the reader's side)
        self._wanted: set[int] = set()

    @property
    def count(self) -> int | None:
        """The windows of a file (None: a live source, no end known)."""
        return len(self.windows) if self.windows is not None else None

    def indices(self, window: int) -> np.ndarray:
        """(T,) the frames window ``window`` samples (as ``plan_windows``: floor(start + offsets));
        past a file's last window, :attr:`BEYOND`."""
        if self.windows is None:
            return np.floor(window * self.stride + self.offsets).astype(np.int64)
        if window >= len(self.windows):
            return np.full(len(self.offsets), self.BEYOND, np.int64)
        return self.windows.indices[window]

    def first(self, window: int) -> int:
        """The first frame window ``window`` samples: no later window needs an earlier one."""
        return int(self.indices(window).min())

    def last(self, window: int) -> int:
        """The last frame window ``window`` samples: it is complete once that frame is in."""
        return int(self.indices(window).max())

    def complete(self, latest: int) -> int:
        """How many windows are complete once frame ``latest`` is in (windows 0 .. n - 1)."""
        if latest < 0:
            return 0
        if self.windows is not None:
            return int(np.searchsorted(self._completes_at, latest, side="right"))
        count = max(0, int((latest - self.offsets[-1]) // self.stride))  # a guess, then corrected
        while count > 0 and self.last(count - 1) > latest:
            count -= 1
        while self.last(count) <= latest:
            count += 1
        return count

    def start_s(self, window: int) -> float:
        if self.windows is not None:
            return float(self.windows.start_s[window])
        return window * self.stride / self.fps

    def end_s(self, window: int) -> float:
        return self.end_frame(window) / self.fps

    def end_frame(self, window: int) -> float:
        """Where window ``window`` ends, in frames of the source (a file's last: at its end)."""
        if self.windows is not None:
            return float(min(self.windows.starts[window] + self.span, self.windows.num_frames))
        return window * self.stride + self.span

    def wanted(self, index: int) -> bool:
        """Whether some window samples frame ``index``; ask in increasing order (the reader)."""
        while self.first(self._planned) <= index:
            self._wanted.update(self.indices(self._planned).tolist())
            self._planned += 1
        found = index in self._wanted
        self._wanted = {i for i in self._wanted if i > index}
        return found


# -- the source, read in a thread --------------------------------------------------------------


@dataclass
class _Arrival:
    index: int
    arrival: float  # time.perf_counter() when the frame was there (after pacing)
    frame: np.ndarray  # (H, W, 3) uint8


class FrameReader:
    """Decodes a PyAV container in a thread (see the module's docstring): every frame goes to
    ``on_frame(index, frame)`` (e.g. the annotated video), the frames ``keep(index)`` accepts
    wait for :meth:`take`. ``speed``: pacing by the frames' timestamps (0: none).

    After the end: ``frames_read``, ``error`` (None: the source ended; else why it failed),
    ``stopped`` (asked to stop)."""

    def __init__(self, container: Any, name: str, keep: Callable[[int], bool], speed: float = 1.0,
                 on_frame: Callable[[int, np.ndarray], None] | None = None) -> None:
        self.container, self.name, self.keep, self.speed, self.on_frame = container, name, keep, speed, on_frame
        self.stream = container.streams.video[0]
        self.fps = float(source_rate(self.stream))
        self.frames_read = 0
        self.error: str | None = None
        self.stopped = False
        self.started_at = self.ended_at = 0.0
        self._pending: list[_Arrival] = []
        self._done = False
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-reader", daemon=True)

    def start(self) -> None:
        self.started_at = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end after the current frame (a blocked network read ends with its timeout)."""
        self.stopped = True
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def take(self, wait_s: float = 0.5) -> tuple[list[_Arrival], bool]:
        """The kept frames that arrived since the last call (waiting up to ``wait_s`` for one)
        and whether the source has ended (nothing more will come)."""
        with self._wake:
            if not self._pending and not self._done:
                self._wake.wait(wait_s)
            frames, self._pending = self._pending, []
            return frames, self._done and not self._pending

    def _run(self) -> None:
        import av

        first_time: float | None = None
        try:
            for packet in self.container.demux(self.stream):
                for frame in packet.decode():
                    if self._stop.is_set():
                        return
                    image = frame.to_ndarray(format="rgb24")
                    index = self.frames_read
                    when = frame.time if frame.time is not None else index / self.fps
                    if first_time is None:
                        first_time = when
                    if self.speed > 0:  # pace: the frame is there at its timestamp, as a camera's would be
                        due = self.started_at + (when - first_time) / self.speed
                        if self._stop.wait(max(0.0, due - time.perf_counter())):
                            return
                    arrival = time.perf_counter()
                    self.frames_read += 1
                    if self.on_frame is not None:
                        self.on_frame(index, image)
                    if self.keep(index):
                        with self._wake:
                            self._pending.append(_Arrival(index, arrival, image))
                            self._wake.notify()
        except (av.error.FFmpegError, OSError) as exc:
            self.error = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        except Exception as exc:  # noqa: BLE001 - whatever stops the thread ends the stream with its reason
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ended_at = time.perf_counter()
            try:
                self.container.close()
            except Exception:  # noqa: BLE001 - closing a failed container may fail again: the stream is over
                pass
            with self._wake:
                self._done = True
                self._wake.notify()


# -- the network over the windows ---------------------------------------------------------------


@dataclass(frozen=True)
class LiveWindow:
    """One window's answer: its number in the plan, where it lies, its (K,) probabilities and
    the seconds from the arrival of its last frame to them."""

    window: int
    start_s: float
    end_s: float
    probs: np.ndarray
    latency_s: float


@dataclass
class LiveStats:
    """What a stream did: frames read, windows answered and skipped, sampled frames dropped
    unused (skipped windows' only), frames after the end of the last window answered, each
    window's latency, the wall seconds, and how it ended (``error`` None: the source ended or
    was stopped)."""

    frames_read: int = 0
    windows: int = 0
    skipped_windows: int = 0
    dropped_frames: int = 0
    frames_after_last_window: int = 0
    latencies_s: list[float] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    stopped: bool = False


def _prepare_all(arrivals: list[_Arrival], prepare: Callable[[np.ndarray], np.ndarray]) -> list[Any]:
    """``prepare`` over the frames of ``arrivals`` in batches of one frame size (a source may change size)."""
    prepared: list[Any] = []
    start = 0
    while start < len(arrivals):
        stop = start + 1
        while stop < len(arrivals) and arrivals[stop].frame.shape == arrivals[start].frame.shape:
            stop += 1
        prepared += list(prepare(np.stack([a.frame for a in arrivals[start:stop]])))
        start = stop
    return prepared


def run_stream(reader: FrameReader, plan: LivePlan, prepare: Callable[[np.ndarray], np.ndarray],
               probs_of: Callable[[list], np.ndarray], drop: bool = True,
               on_window: Callable[[LiveWindow], None] | None = None, min_side: int = 0) -> LiveStats:
    """Read ``reader`` to its end and answer every window of ``plan`` as soon as its last frame
    is in (see the module's docstring): ``prepare`` (n, H, W, 3) uint8 -> n prepared frames
    (each frame once, on arrival; a backend's), ``probs_of`` [window: its T prepared frames]
    -> (1, K) probabilities (a backend's), ``on_window`` each answer. ``drop``: skip the windows that completed while
    the network was busy but the newest. ``min_side``: refuse a source with a side below it
    (the network's patch size). Ctrl-C stops the stream like its end.

    Raises:
        VideoTooSmallError: the first frame has a side below ``min_side`` (the reader is stopped).
    """
    stats = LiveStats()
    held: dict[int, Any] = {}  # prepared frames from the next window's first on: the ring buffer
    arrived: dict[int, float] = {}
    used: set[int] = set()  # held frames a finished window sampled
    latest, next_window, last_done = -1, 0, -1
    checked = False

    def evict(below: int) -> None:
        for index in [i for i in held if i < below]:
            del held[index]
            arrived.pop(index, None)
            if index in used:
                used.discard(index)
            else:  # sampled, arrived, and no window that went through the network had it
                stats.dropped_frames += 1

    reader.start()
    try:
        while True:
            batch, ended = reader.take()
            if batch and not checked:
                check_frame_size(reader.name, *batch[0].frame.shape[:2], min_side)
                checked = True
            if batch:
                latest = batch[-1].index
            complete = plan.complete(latest)
            if drop and complete - 1 > next_window:  # the network fell behind: take the newest window
                stats.skipped_windows += complete - 1 - next_window
                next_window = complete - 1
            floor = plan.first(next_window)
            evict(floor)
            fresh = [a for a in batch if a.index >= floor]
            stats.dropped_frames += len(batch) - len(fresh)
            for arrival, frame in zip(fresh, _prepare_all(fresh, prepare)):
                held[arrival.index] = frame
                arrived[arrival.index] = arrival.arrival
            while next_window < complete:
                indices = plan.indices(next_window).tolist()
                probs = np.asarray(probs_of([[held[i] for i in indices]]), dtype=np.float32)[0]
                latency = time.perf_counter() - arrived[indices[-1]]
                stats.latencies_s.append(latency)
                stats.windows += 1
                used.update(indices)
                last_done = next_window
                if on_window is not None:
                    on_window(LiveWindow(next_window, plan.start_s(next_window), plan.end_s(next_window), probs,
                                         latency))
                next_window += 1
                evict(plan.first(next_window))
                if drop:  # newer frames may have completed newer windows meanwhile: look first
                    break
            if ended and next_window >= plan.complete(latest):
                break
    except KeyboardInterrupt:
        reader.stop()
    except BaseException:
        reader.stop()
        raise
    finally:
        reader.join(timeout=READ_TIMEOUT_S + 1)
    stats.frames_read = reader.frames_read
    stats.error, stats.stopped = reader.error, reader.stopped
    stats.seconds = (reader.ended_at or time.perf_counter()) - reader.started_at
    covered = math.ceil(plan.end_frame(last_done) - 1e-9) if last_done >= 0 else 0  # frames 0 .. covered - 1
    stats.frames_after_last_window = max(0, stats.frames_read - covered)
    return stats


# -- output -------------------------------------------------------------------------------------


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float]:
    """Median, 95th percentile and largest latency in milliseconds (empty: no windows)."""
    if not len(latencies_s):
        return {}
    values = np.asarray(latencies_s, np.float64) * 1000
    return {"median_ms": round(float(np.median(values)), 2), "p95_ms": round(float(np.percentile(values, 95)), 2),
            "max_ms": round(float(values.max()), 2)}


class LiveCsv:
    """The windows of a stream as CSV rows, appended and flushed one by one (a killed run keeps
    the rows written): ``window, start_s, end_s``, ``top1, top1_prob, ...`` (the timeline's
    ``<stem>_windows.csv`` columns) and ``latency_ms``. Not written atomically on purpose:
    the file grows while the stream runs."""

    def __init__(self, path: str | Path, class_names: Sequence[str], top_k: int = 5) -> None:
        self.path = Path(path)
        self.class_names = list(class_names)
        self.k = min(top_k, len(self.class_names))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", newline="")  # noqa: SIM115 - kept open for the stream's length
        self._row(["window", "start_s", "end_s"] + [c for i in range(1, self.k + 1) for c in (f"top{i}", f"top{i}_prob")]
                  + ["latency_ms"])

    def _row(self, values: list[Any]) -> None:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow(values)
        self._file.write(out.getvalue())
        self._file.flush()  # in the operating system's hands: a killed process keeps the row

    def write(self, window: LiveWindow) -> None:
        values, indices = top_classes(window.probs[None], self.k)
        ranked = [x for p, c in zip(values[0].tolist(), indices[0].tolist()) for x in (self.class_names[c], f"{p:.4f}")]
        self._row([window.window, f"{window.start_s:.3f}", f"{window.end_s:.3f}", *ranked,
                   f"{window.latency_s * 1000:.1f}"])

    def close(self) -> None:
        self._file.close()


def summary_lines(name: str, stats: LiveStats, plan: LivePlan, drop: bool, csv_name: str) -> list[str]:
    """The lines that end a stream (``predict --stream`` prints them; the first on stderr when
    the source failed): how it ended, the latency, what was dropped, what came after the last
    window."""
    read = f"{stats.frames_read} frames ({stats.frames_read / plan.fps:.1f} s of video in {stats.seconds:.1f} s)"
    if stats.error:
        lines = [f"{name}: the source failed after {read}: {stats.error}; the {stats.windows} windows answered "
                 f"before are in {csv_name}"]
    else:
        how = "stopped (Ctrl-C)" if stats.stopped else "the source ended"
        lines = [f"{name}: {how} after {read}: {stats.windows} windows answered"]
    latency = latency_summary(stats.latencies_s)
    if latency:
        lines.append(f"latency from a window's last frame to its prediction: median {latency['median_ms']:.0f} ms, "
                     f"95th percentile {latency['p95_ms']:.0f} ms, largest {latency['max_ms']:.0f} ms")
    if stats.skipped_windows:
        lines.append(f"dropped {stats.dropped_frames} sampled frames: {stats.skipped_windows} of "
                     f"{stats.windows + stats.skipped_windows} windows skipped, the model being slower than the source "
                     "(--no-drop answers every window, later)")
    elif drop and stats.windows:
        lines.append("no frame dropped: the model kept up with the source")
    if stats.frames_after_last_window:
        lines.append(f"the last {stats.frames_after_last_window} frames "
                     f"({stats.frames_after_last_window / plan.fps:.2f} s) came after the last whole window")
    return lines
