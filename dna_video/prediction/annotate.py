"""Annotated video: the source's frames with the current label drawn on them, written as H.264.

Every frame gets a band across its top (:func:`draw_label`): the class name and probability
in white on near-black, and under them a bar whose green part is the probability (the full
width is 1). With attention maps (a PyTorch model's ``--annotate-attention``) the maps are
blended into the region of the frame the model's centre crop covers (:func:`crop_region`):
the first branch (DnA's positive attention, or softmax's) in red, the second (DnA's negative)
in blue, each scaled from its own smallest to largest weight; the band names them in their
colours (``positive`` / ``negative``, or ``+`` / ``-`` on a frame too narrow for the names).

Which label a frame shows:

* a timeline (:func:`annotate_timeline`): the segment the frame lies in (as the ``.srt``
  shows it) with the probability of that class in the window whose centre is nearest, and that
  window's attention;
* a stream (:class:`LiveAnnotator`): the last window answered when the frame arrived, what a
  viewer of the live output sees (it changes one latency after the window's last frame);
  before the first answer the band says so.

The output has the source's frame count, size and frame rate (H.264 in mp4, ``yuv420p``;
``yuv444p`` for an odd width or height, which 4:2:0 cannot hold), written atomically. numpy,
Pillow and PyAV only: an ``.onnx`` model's ``predict`` draws labels without torch.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from dna_video.common.atomic import atomic_path
from dna_video.prediction.timeline import Segment, Timeline

log = logging.getLogger(__name__)

__all__ = [
    "BAND_COLOUR", "TEXT_COLOUR", "BAR_COLOUR", "TRACK_COLOUR", "BRANCH_COLOURS", "FrameLabel", "bar_rows", "band_height",
    "draw_label", "crop_region", "blend_attention", "annotate_frame", "encode_video", "annotate_timeline",
    "LiveAnnotator",
]

BAND_COLOUR = (16, 16, 16)
TEXT_COLOUR = (255, 255, 255)
BAR_COLOUR = (40, 200, 80)
TRACK_COLOUR = (90, 90, 90)
#: Attention branches in order: DnA's positive (or softmax's one map), then DnA's negative.
BRANCH_COLOURS = ((255, 40, 40), (40, 110, 255))
ATTENTION_STRENGTH = 0.6
#: The legend's words on a frame too narrow for the branch names.
SHORT_NAMES = {"positive": "+", "negative": "-", "softmax": "att"}


@dataclass(frozen=True)
class FrameLabel:
    """What a frame shows: class ``name`` and ``prob``, and the attention ``maps`` (branch ->
    (h, w) over the centre crop's patches) when blended; ``name`` None: no answer yet."""

    name: str | None
    prob: float = 0.0
    maps: Mapping[str, np.ndarray] | None = None


def _font_size(height: int) -> int:
    return max(9, round(height / 24))


def bar_rows(height: int) -> range:
    """The rows of the probability bar in a frame ``height`` rows high (under the text)."""
    size = _font_size(height)
    return range(size + 6, size + 6 + max(3, size // 3))


def band_height(height: int) -> int:
    """Rows the band takes at the top of a frame ``height`` rows high."""
    return bar_rows(height).stop + 3


def draw_label(frame: np.ndarray, label: FrameLabel) -> np.ndarray:
    """``frame`` (H, W, 3) uint8 with the band of ``label`` drawn across its top (a copy)."""
    from dna_video.analysis.plotting import fit_text  # here: plotting imports matplotlib (seconds to start)

    height, width = frame.shape[:2]
    size = _font_size(height)
    font = ImageFont.load_default(size=size)  # Pillow's own scalable font: the same on every machine
    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    pad = max(2, size // 4)
    bar = bar_rows(height)
    draw.rectangle((0, 0, width - 1, band_height(height) - 1), fill=BAND_COLOUR)
    text = f"{label.name}  {label.prob:.2f}" if label.name is not None else "no prediction yet"
    legend, legend_width = [], 0.0
    names = list(label.maps or {})[: len(BRANCH_COLOURS)]
    for words in (names, [SHORT_NAMES.get(n, n[:3]) for n in names]):  # the names, else their signs
        legend_width = sum(draw.textlength(f" {n}", font=font) for n in words)
        if legend_width <= (width - 2 * pad) / 3:  # the label comes first
            legend = words
            break
    legend_width = legend_width if legend else 0.0
    draw.text((pad, 2), fit_text(draw, text, font, width - 2 * pad - legend_width), fill=TEXT_COLOUR, font=font)
    x = width - pad - legend_width
    for name, colour in zip(legend, BRANCH_COLOURS):
        draw.text((x, 2), f" {name}", fill=colour, font=font)
        x += draw.textlength(f" {name}", font=font)
    draw.rectangle((pad, bar.start, width - pad - 1, bar.stop - 1), fill=TRACK_COLOUR)
    filled = int(round(label.prob * (width - 2 * pad))) if label.name is not None else 0
    if filled > 0:
        draw.rectangle((pad, bar.start, pad + filled - 1, bar.stop - 1), fill=BAR_COLOUR)
    return np.asarray(image)


def crop_region(height: int, width: int, crop_size: int, num_crops: int = 1) -> tuple[int, int, int, int]:
    """(top, left, rows, columns) of a ``height`` x ``width`` frame that the evaluation's centre
    crop covers: the frame resized to a short side of ``crop_size`` (torchvision's rule), the
    centre square of ``crop_size`` (``num_crops`` 1: torchvision's ``center_crop``; 3: the
    middle one of three), mapped back to the frame's pixels."""
    if width <= height:
        new_height, new_width = int(crop_size * height / width), crop_size
    else:
        new_height, new_width = crop_size, int(crop_size * width / height)
    if num_crops == 1:
        top, left = int(round((new_height - crop_size) / 2.0)), int(round((new_width - crop_size) / 2.0))
    else:
        top, left = (new_height - crop_size) // 2, (new_width - crop_size) // 2
    scale_y, scale_x = height / new_height, width / new_width
    return (int(round(top * scale_y)), int(round(left * scale_x)), max(1, int(round(crop_size * scale_y))),
            max(1, int(round(crop_size * scale_x))))


def blend_attention(frame: np.ndarray, maps: Mapping[str, np.ndarray], region: tuple[int, int, int, int],
                    strength: float = ATTENTION_STRENGTH) -> np.ndarray:
    """``frame`` with the (h, w) ``maps`` (up to two branches) blended into ``region`` (see the
    module's docstring): each map scaled to [0, 1] over its own range and upsampled
    (bilinear); a pixel takes the branches' colours in proportion to their weights, at
    ``strength`` x the larger weight. A copy; outside ``region`` nothing changes."""
    top, left, rows, columns = region
    weights, colours = [], []
    for (_, attention), colour in zip(maps.items(), BRANCH_COLOURS):
        values = np.asarray(attention, np.float32)
        low, span = float(values.min()), float(values.max() - values.min())
        scaled = (values - low) / span if span > 0 else np.zeros_like(values)
        weights.append(np.asarray(Image.fromarray(scaled, mode="F").resize((columns, rows), Image.Resampling.BILINEAR)))
        colours.append(np.asarray(colour, np.float32))
    out = frame.copy()
    if not weights:
        return out
    stacked = np.clip(np.stack(weights), 0.0, 1.0)  # branch, rows, columns
    total = stacked.sum(0)
    colour = np.einsum("brc,bk->rck", stacked, np.stack(colours)) / np.maximum(total, 1e-6)[..., None]
    alpha = strength * stacked.max(0)[..., None]
    patch = out[top:top + rows, left:left + columns].astype(np.float32)
    out[top:top + rows, left:left + columns] = np.clip((1 - alpha) * patch + alpha * colour, 0, 255).astype(np.uint8)
    return out


def annotate_frame(frame: np.ndarray, label: FrameLabel, region: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """``frame`` with ``label``'s attention blended into ``region`` (when it has maps) and its band."""
    if label.maps and region is not None:
        frame = blend_attention(frame, label.maps, region)
    return draw_label(frame, label)


def encode_video(path: str | Path, frames: Iterable[np.ndarray], rate: Fraction, crf: int = 20) -> int:
    """The (H, W, 3) uint8 ``frames`` as H.264 at ``rate`` frames per second into ``path``
    (mp4), atomically; returns the frames written (0: no frame, no file). Not
    :func:`dna_video.data.video.write_video`: the rate stays the source's exact fraction
    (30000/1001) and an odd size is kept (4:4:4)."""
    import av

    frames = iter(frames)
    first = next(frames, None)
    if first is None:
        return 0
    height, width = first.shape[:2]
    count = 0
    with atomic_path(path) as partial:
        with av.open(str(partial), mode="w") as container:
            stream = container.add_stream("libx264", rate=rate)
            stream.width, stream.height = width, height
            stream.pix_fmt = "yuv420p" if height % 2 == 0 and width % 2 == 0 else "yuv444p"
            stream.codec_context.options = {"crf": str(crf), "preset": "veryfast"}
            for frame in itertools.chain([first], frames):
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
                count += 1
            for packet in stream.encode():
                container.mux(packet)
    return count


# -- a timeline's video --------------------------------------------------------------------------


def _decoded_frames(path: str) -> tuple[Fraction, Iterator[np.ndarray]]:
    """The frame rate of ``path`` and its frames in order (PyAV; a damaged end stops them, logged)."""
    import av

    from dna_video.prediction.stream import source_rate

    container = av.open(path)
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    rate = source_rate(stream)

    def frames() -> Iterator[np.ndarray]:
        count = 0
        try:
            for frame in container.decode(stream):
                count += 1
                yield frame.to_ndarray(format="rgb24")
        except (av.error.FFmpegError, OSError) as exc:
            log.warning("%s: decoding stops after %d frames (%s): the annotated video ends there", path, count,
                        getattr(exc, "strerror", None) or exc)
        finally:
            container.close()

    return rate, frames()


def timeline_frame_labels(timeline: Timeline, probs: np.ndarray, segments: Sequence[Segment], num_frames: int,
                          window_maps: Sequence[Mapping[str, np.ndarray]] | None = None) -> list[FrameLabel]:
    """The label of each of ``num_frames`` frames of a timeline's video (see the module's
    docstring): ``probs`` the (W, K) window probabilities the segments were cut from (smoothed
    or not), ``window_maps`` one entry per window when attention is drawn."""
    if not segments or not len(probs):
        return [FrameLabel(None)] * num_frames
    times = np.arange(num_frames) / timeline.windows.fps
    ends = np.array([s.end_s for s in segments])
    in_segment = np.minimum(np.searchsorted(ends, times, side="right"), len(segments) - 1)
    centres = timeline.windows.centre_s[: len(probs)]
    after = np.clip(np.searchsorted(centres, times), 0, len(centres) - 1)
    before = np.clip(after - 1, 0, len(centres) - 1)
    nearest = np.where(np.abs(centres[before] - times) <= np.abs(centres[after] - times), before, after)
    labels = []
    for segment_index, window in zip(in_segment.tolist(), nearest.tolist()):
        segment = segments[segment_index]
        maps = window_maps[window] if window_maps else None
        labels.append(FrameLabel(segment.name, float(probs[window, segment.label]), maps))
    return labels


def annotate_timeline(timeline: Timeline, probs: np.ndarray, segments: Sequence[Segment], out: str | Path,
                      crop_size: int, num_crops: int = 1,
                      window_maps: Sequence[Mapping[str, np.ndarray]] | None = None) -> int:
    """Write the annotated copy of the timeline's video to ``out`` (see the module's docstring;
    ``probs`` and ``segments`` as in its files, ``crop_size`` / ``num_crops`` where attention
    goes); returns the frames written."""
    rate, frames = _decoded_frames(timeline.path)
    labels = timeline_frame_labels(timeline, probs, segments, timeline.windows.num_frames, window_maps)

    def drawn() -> Iterator[np.ndarray]:
        region = None
        for index, frame in enumerate(frames):
            region = region or crop_region(*frame.shape[:2], crop_size, num_crops)
            # A file may decode more frames than its header counts: those show the last label.
            yield annotate_frame(frame, labels[min(index, len(labels) - 1)], region)

    return encode_video(out, drawn(), rate)


# -- a stream's video ----------------------------------------------------------------------------


class LiveAnnotator:
    """The annotated copy of a stream, encoded in a thread as the frames come: :meth:`add` (the
    reader, every frame) records the label current at its arrival, :meth:`update` (each window
    answered) changes it, :meth:`close` finishes the file (atomically) and returns the frames
    written. ``crop_size`` / ``num_crops``: where attention goes."""

    def __init__(self, path: str | Path, rate: Fraction, crop_size: int, num_crops: int = 1) -> None:
        self.path, self.rate, self.crop_size, self.num_crops = Path(path), rate, crop_size, num_crops
        self.current = FrameLabel(None)
        self.frames = 0
        self.error: str | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=64)  # frames waiting for the encoder
        self._thread = threading.Thread(target=self._encode, name="annotate-encoder", daemon=True)
        self._thread.start()

    def update(self, label: FrameLabel) -> None:
        self.current = label

    def add(self, index: int, frame: np.ndarray) -> None:
        label = self.current
        while self.error is None:  # a full queue waits for the encoder (it never waits on a failed one)
            try:
                self._queue.put((frame, label), timeout=0.5)
                return
            except queue.Full:
                continue

    def _drawn(self) -> Iterator[np.ndarray]:
        region = None
        while (item := self._queue.get()) is not None:
            frame, label = item
            if region is None:
                region = crop_region(*frame.shape[:2], self.crop_size, self.num_crops)
            yield annotate_frame(frame, label, region)

    def _encode(self) -> None:
        try:
            self.frames = encode_video(self.path, self._drawn(), self.rate)
        except Exception as exc:  # noqa: BLE001 - reported by close(); the stream goes on without it
            self.error = f"{type(exc).__name__}: {exc}"

    def close(self) -> int:
        """Finish the file; the frames written (0: none, no file; see ``error``)."""
        while self._thread.is_alive():
            try:
                self._queue.put(None, timeout=0.5)
                break
            except queue.Full:  # the encoder is behind (or has just failed): look again
                continue
        self._thread.join()
        return self.frames
