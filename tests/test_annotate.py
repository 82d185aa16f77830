"""``predict --annotate`` / ``--annotate-attention`` (dna_video.prediction.annotate, torch_backend):
the band drawn on a frame (bar length = probability, counted in pixels), where the centre crop
lies in the frame (against the evaluation transform's own crop of a coordinate-coded frame),
the attention blended there and nowhere else, each window's attention against the maps of
the centre crop computed directly, and an annotated timeline video decoded back (decord):
the source's frame count, size and rate, each frame's bar against the label and probability
read from the timeline's own files, the picture outside the band unchanged.

(The stream's annotated video: ``tests/test_stream.py``, the real-time test.)
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import decord
import numpy as np
import pytest
import torch

from analysis_trees import CLASSES, class_frames
from dna_video.prediction.annotate import (
    BAND_COLOUR,
    BAR_COLOUR,
    BRANCH_COLOURS,
    TRACK_COLOUR,
    FrameLabel,
    band_height,
    bar_rows,
    blend_attention,
    crop_region,
    draw_label,
)
from dna_video.analysis.maps import capture_maps, cls_maps
from dna_video.prediction.torch_backend import load_model
from dna_video.data.transforms import EvalClipTransform
from dna_video.data.video import write_video
from dna_video.tools.predict import main

FPS = 30.0
SCALE = 2  # the class clips (48 x 64) enlarged: a band of readable size on a 96 x 128 frame


def is_bar(pixels: np.ndarray) -> np.ndarray:
    """Pixels of the bar's green (H.264 moves colours by a few levels)."""
    r, g, b = (pixels[..., i].astype(int) for i in range(3))
    return (g > 150) & (r < 110) & (b < 140)


def is_track(pixels: np.ndarray) -> np.ndarray:
    return np.all(np.abs(pixels.astype(int) - np.array(TRACK_COLOUR)) < 30, axis=-1)


def bar_row(height: int) -> int:
    """A row through the middle of the bar."""
    rows = bar_rows(height)
    return (rows.start + rows.stop - 1) // 2


def bar_fraction(frame: np.ndarray) -> float:
    """The green part of the bar's track, measured in pixels of one row through the bar."""
    row = frame[bar_row(frame.shape[0])]
    green, track = is_bar(row).sum(), is_track(row).sum()
    return green / (green + track)


# -- one frame --------------------------------------------------------------------------------------


@pytest.mark.parametrize("prob", [0.0, 0.25, 0.5, 0.993])
def test_the_band_draws_the_name_and_a_bar_as_long_as_the_probability(prob):
    frame = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    out = draw_label(frame, FrameLabel("Bright", prob))
    band = band_height(96)
    np.testing.assert_array_equal(out[band:], frame[band:])  # below the band: untouched
    row = out[bar_row(96)]
    green = np.all(row == BAR_COLOUR, axis=-1).sum()
    track = np.all(row == TRACK_COLOUR, axis=-1).sum()
    assert green == round(prob * (green + track)) and green + track > 100
    assert np.all(out[0] == BAND_COLOUR)  # the band's top row: its colour only
    assert (out[2:bar_row(96) - 2].min(-1) > 180).sum() > 20  # the white letters (anti-aliased)
    waiting = draw_label(frame, FrameLabel(None))
    assert not np.all(waiting[bar_row(96)] == BAR_COLOUR, axis=-1).any()  # no answer: no bar
    assert not np.array_equal(waiting[:band], out[:band])  # and other words


@pytest.mark.parametrize("height, width, crop, crops", [(360, 640, 224, 1), (360, 640, 224, 3), (640, 360, 96, 3),
                                                        (48, 64, 32, 3), (100, 100, 64, 1)])
def test_the_crop_region_is_where_the_evaluation_crop_comes_from(height, width, crop, crops):
    """A frame whose red codes the column and green the row: the evaluation's centre crop
    (EvalClipTransform, not normalised) shows which columns and rows it came from."""
    xs = np.broadcast_to(np.round(np.arange(width) * 255 / (width - 1)), (height, width))
    ys = np.broadcast_to(np.round(np.arange(height) * 255 / (height - 1))[:, None], (height, width))
    frame = np.stack([xs, ys, np.zeros_like(xs)], -1).astype(np.uint8)
    views = EvalClipTransform(crop, crops, (0, 0, 0), (1, 1, 1))(torch.from_numpy(frame).permute(2, 0, 1)[None])
    centre = views[crops // 2, :, 0].numpy() * 255  # (C, crop, crop) of the middle crop
    top, left, rows, columns = crop_region(height, width, crop, crops)
    scale_x, scale_y = columns / crop, rows / crop
    # The crop's first and last columns sample the frame at the centres of their pixels.
    seen_left = centre[0, crop // 2, 0] * (width - 1) / 255 - (scale_x - 1) / 2
    seen_right = centre[0, crop // 2, -1] * (width - 1) / 255 + (scale_x - 1) / 2
    seen_top = centre[1, 0, crop // 2] * (height - 1) / 255 - (scale_y - 1) / 2
    tolerance_x, tolerance_y = max(1.5, (width - 1) / 255 + 1), max(1.5, (height - 1) / 255 + 1)
    assert seen_left == pytest.approx(left, abs=tolerance_x)
    assert seen_right == pytest.approx(left + columns - 1, abs=tolerance_x)
    assert seen_top == pytest.approx(top, abs=tolerance_y)


def test_attention_is_blended_into_the_crop_region_only():
    """Two 4 x 4 maps, each one hot patch, over a 36-pixel crop of a 36 x 48 frame: 9 pixels a
    patch, so a patch's centre pixel takes its map's full weight (bilinear upsampling)."""
    frame = np.full((36, 48, 3), 100, np.uint8)
    positive, negative = np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32)
    positive[1, 2], negative[3, 0] = 0.9, 0.7
    region = crop_region(36, 48, 36, 1)
    assert region == (0, 6, 36, 36)
    out = blend_attention(frame, {"positive": positive, "negative": negative}, region)
    np.testing.assert_array_equal(out[:, :6], frame[:, :6])  # outside the crop: untouched
    np.testing.assert_array_equal(out[:, 42:], frame[:, 42:])
    for (row, col), colour in (((1, 2), BRANCH_COLOURS[0]), ((3, 0), BRANCH_COLOURS[1])):
        y, x = 9 * row + 4, 6 + 9 * col + 4
        expected = 0.4 * 100 + 0.6 * np.asarray(colour)
        np.testing.assert_allclose(out[y, x], expected, atol=1.01)
    np.testing.assert_array_equal(out[4, 6 + 4], frame[4, 6 + 4])  # a cold patch's centre: no colour


@pytest.fixture(scope="session")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint[0])


def test_each_windows_attention_is_the_centre_crops_cls_attention(model):
    """A model keeping attention (``attention=True``): the maps kept per window are the last block's cls maps of
    the centre crop (of 3) averaged over the window's frames, computed here directly; and the
    written-out path gives the same probabilities as the fused one."""
    frames = np.random.default_rng(3).integers(0, 256, (2, 4, 48, 64, 3), dtype=np.uint8)  # 2 windows of 4
    with_maps, plain = model.using("cpu", attention=True), model.using("cpu")
    windows = [with_maps.prepare(w) for w in frames]
    probs = with_maps.probs_of(windows)
    np.testing.assert_allclose(probs, plain.probs_of(windows), atol=1e-6)
    assert len(with_maps.window_maps) == 2
    transform = EvalClipTransform(32, 3, model.settings.mean, model.settings.std)
    for window, kept in zip(frames, with_maps.window_maps):
        views = transform(torch.from_numpy(window).permute(0, 3, 1, 2))  # (crops, C, T, 32, 32)
        _, captured = capture_maps(model.net, views[1:2], ["blocks.0.attn"])
        direct = cls_maps(captured["blocks.0.attn"], 4, (4, 4))
        assert set(kept) == set(direct) == {"positive", "negative"}
        for name, value in direct.items():
            np.testing.assert_allclose(kept[name], value[0].mean(0).numpy(), atol=1e-6)


# -- an annotated timeline -------------------------------------------------------------------------


def enlarged(frames: np.ndarray) -> np.ndarray:
    return np.repeat(np.repeat(frames, SCALE, axis=1), SCALE, axis=2)


@pytest.fixture(scope="session")
def video(tmp_path_factory) -> Path:
    """3 s: dark, bright, dark (10-frame class clips, enlarged to 96 x 128)."""
    path = tmp_path_factory.mktemp("annotate") / "porch.mp4"
    plan = [0, 0, 0, 1, 1, 1, 1, 0, 0]
    write_video(str(path), (f for i, label in enumerate(plan) for f in enlarged(class_frames(label, 70 + i))), fps=FPS)
    return path


def decoded(path: Path) -> tuple[np.ndarray, float]:
    reader = decord.VideoReader(str(path), num_threads=1)
    return reader.get_batch(list(range(len(reader)))).asnumpy(), reader.get_avg_fps()


def expected_labels(out: Path, stem: str, count: int) -> list[tuple[str, float]]:
    """(segment name, probability of its class in the nearest window) of each frame, from the
    timeline's own files: the segments JSON and the windows CSV."""
    record = json.loads((out / f"{stem}_segments.json").read_text())
    with open(out / f"{stem}_windows.csv") as f:
        rows = list(csv.DictReader(f))
    centres = np.array([(float(r["start_s"]) + float(r["end_s"])) / 2 for r in rows])
    labels = []
    for index in range(count):
        t = index / record["fps"]
        segment = next((s for s in record["segments"] if s["start_s"] <= t < s["end_s"]), record["segments"][-1])
        row = rows[int(np.argmin(np.abs(centres - t)))]
        prob = next(float(row[f"top{k}_prob"]) for k in (1, 2) if row[f"top{k}"] == segment["name"])
        labels.append((segment["name"], prob))
    return labels


@pytest.mark.slow
def test_an_annotated_timeline_has_the_sources_frames_with_each_label_drawn(tiny_checkpoint, video, tmp_path):
    out = tmp_path / "out"
    assert main([str(tiny_checkpoint[0]), str(video), "--timeline", "--annotate", "--out", str(out)]) == 0
    source, source_fps = decoded(video)
    annotated, fps = decoded(out / "porch_annotated.mp4")
    assert annotated.shape == source.shape == (90, 96, 128, 3) and fps == source_fps == FPS
    band = band_height(96)
    # Under the band each frame is its own source frame, H.264 twice (noisy clips: about 5
    # levels), and further from the source's previous and next frames (about 16).
    under, original = annotated[:, band:].astype(int), source[:, band:].astype(int)
    own = np.abs(under - original).mean(axis=(1, 2, 3))
    shifted = np.minimum(np.abs(under - np.roll(original, 1, 0)).mean(axis=(1, 2, 3)),
                         np.abs(under - np.roll(original, -1, 0)).mean(axis=(1, 2, 3)))
    assert own.max() < 8 and np.all(own < shifted)
    assert np.abs(annotated[:, 0].astype(int) - np.array(BAND_COLOUR)).max() <= 12
    labels = expected_labels(out, "porch", 90)
    assert {name for name, _ in labels} == set(CLASSES)
    for frame, (_, prob) in zip(annotated, labels):
        assert bar_fraction(frame) == pytest.approx(prob, abs=0.03)

    # --annotate-attention: the attention over the centre crop; the rest as with --annotate.
    attention = tmp_path / "attention"
    assert main([str(tiny_checkpoint[0]), str(video), "--timeline", "--annotate-attention", "--out",
                 str(attention)]) == 0
    blended, _ = decoded(attention / "porch_annotated.mp4")
    top, left, rows, columns = crop_region(96, 128, 32, 3)
    changed = np.abs(blended.astype(int) - annotated.astype(int)).mean(axis=(0, 3))  # per pixel, over frames
    inside = changed[band:, left + 2:left + columns - 2].mean()
    outside = np.concatenate([changed[band:, :left - 2], changed[band:, left + columns + 2:]], axis=1).mean()
    assert inside > 15 and outside < 6  # outside: two encodings of one picture differ by a few levels
