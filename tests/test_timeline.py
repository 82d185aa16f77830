"""``predict --timeline`` on a long generated video that alternates dark and bright clips at known
times, read by the tiny dark-vs-bright model trained in the tests (conftest's ``tiny_checkpoint``:
4 frames 2 apart, 3 crops of 32). Segment boundaries within max(stride, window / 2) of the truth,
labels right; the CSV, JSON, SRT and PNG read back; the figure explains itself; every sampled
frame decoded once although windows overlap; memory flat in the video's length."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from analysis_trees import CLASSES, FRAMES, class_frames
from dna_video.prediction.torch_backend import load_model
from dna_video.analysis.plotting import PROBABILITY_UNIT, timeline_figure
from dna_video.prediction.timeline import (
    Stride,
    parse_stride,
    plan_windows,
    segments_of,
    smooth,
    srt_text,
    srt_timestamp,
    video_timeline,
    windows_csv,
)
from dna_video.data.sampling import FrameSampler
from dna_video.data.video import write_video
from dna_video.tasks.views import mean_view_probs
from dna_video.tools.predict import main
from test_figures import bar_label, colour_bars, overlapping_tick_labels

FPS = 30.0
# (class, first frame, end frame) at 30 fps: 0-2 s dark, 2-5 s bright, 5-6 s dark, 6-9 s bright, 9-10 s dark.
TRUTH = [(0, 0, 60), (1, 60, 150), (0, 150, 180), (1, 180, 270), (0, 270, 300)]


def long_frames(plan, seed: int = 50):
    """The frames of ``plan`` one by one (never the whole video in memory): each segment is made
    of the tiny model's class clips, ``FRAMES`` frames each, a new seed every clip."""
    for label, first, end in plan:
        for start in range(first, end, FRAMES):
            seed += 1
            yield from class_frames(label, seed)[: min(FRAMES, end - start)]


def write_long(path: Path, repeats: int = 1) -> Path:
    plan = [(label, first + r * 300, end + r * 300) for r in range(repeats) for label, first, end in TRUTH]
    write_video(str(path), long_frames(plan), fps=FPS)
    return path


def parse_srt(text: str) -> list[tuple[float, float, str]]:
    """(start s, end s, text) of each SubRip cue, numbered 1, 2, ... in order."""
    stamp = r"(\d\d):(\d\d):(\d\d),(\d\d\d)"
    cues = []
    for number, block in enumerate(text.strip().split("\n\n"), 1):
        first, times, *lines = block.split("\n")
        assert first == str(number)
        match = re.fullmatch(f"{stamp} --> {stamp}", times)
        assert match, times
        h1, m1, s1, ms1, h2, m2, s2, ms2 = map(int, match.groups())
        cues.append((h1 * 3600 + m1 * 60 + s1 + ms1 / 1000, h2 * 3600 + m2 * 60 + s2 + ms2 / 1000, "\n".join(lines)))
    return cues


@pytest.fixture(scope="session")
def long_video(tmp_path_factory) -> Path:
    return write_long(tmp_path_factory.mktemp("long") / "kitchen.mp4")


@pytest.fixture(scope="session")
def run_folder(tiny_checkpoint, long_video, tmp_path_factory):
    """``predict CKPT VIDEO --timeline`` with the checkpoint inside a run folder and no --out:
    (run folder, what it printed)."""
    ckpt, _ = tiny_checkpoint
    run = tmp_path_factory.mktemp("run")
    (run / "checkpoints").mkdir()
    shutil.copy(ckpt, run / "checkpoints" / "last.ckpt")
    (run / "config.yaml").write_text("model: {}\n")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main([str(run / "checkpoints" / "last.ckpt"), str(long_video), "--timeline", "--top-k", "2"])
    assert code == 0
    return run, printed.getvalue()


# -- windows, smoothing, segments, files (no model) ----------------------------------------------


def test_stride_is_seconds_or_frames_and_anything_else_is_refused():
    assert parse_stride("2.5") == Stride(2.5, "s") == parse_stride("2.5s")
    assert parse_stride("16f") == Stride(16, "f") and parse_stride("16f").frames(25.0) == 16
    assert parse_stride(".5").frames(30.0) == 15
    for bad in ("0", "-1", "2m", "abc", "", "1.5.2"):
        with pytest.raises(ValueError, match="give seconds"):
            parse_stride(bad)


def test_windows_slide_the_clip_span_along_the_video_and_cover_its_end():
    # The paper's clip: 8 frames 32 apart at 30 fps, on a 25 fps file: 26.67 file frames a step.
    sampler = FrameSampler(8, 32, 30.0)
    windows = plan_windows(1000, 25.0, sampler)
    assert windows.step == pytest.approx(32 * 25 / 30)
    assert windows.window_s == pytest.approx(8 * 32 / 30)  # frames x sampling rate at the target rate
    assert windows.stride == pytest.approx(4 * windows.step)  # default: half the window, whole steps
    assert windows.starts[0] == 0 and windows.end_s[-1] == pytest.approx(1000 / 25)  # the tail has a window
    assert np.allclose(np.diff(windows.starts[:-1]), windows.stride)
    assert windows.indices.shape == (len(windows), 8) and windows.indices.max() <= 999
    np.testing.assert_array_equal(windows.indices[1, :4], windows.indices[0, 4:])  # overlapping windows share frames
    assert plan_windows(1000, 25.0, sampler, Stride(2.0)).stride == 50
    assert plan_windows(1000, 25.0, sampler, Stride(16, "f")).stride == 16
    # Shorter than one window: one window, the last frame repeated (as evaluation clamps).
    short = plan_windows(100, 25.0, sampler)
    assert len(short) == 1 and short.indices[0, -1] == 99 and short.end_s[0] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="uniform"):
        plan_windows(1000, 25.0, FrameSampler(8, mode="uniform"))


def test_smoothing_averages_neighbouring_windows():
    probs = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], np.float32)
    np.testing.assert_array_equal(smooth(probs, 1), probs)
    expected = np.array([[0.5, 0.5], [2 / 3, 1 / 3], [2 / 3, 1 / 3], [1.0, 0.0]], np.float32)
    smoothed = smooth(probs, 3)
    assert smoothed.dtype == np.float32
    np.testing.assert_allclose(smoothed, expected, rtol=0, atol=1e-6)


def test_segments_merge_consecutive_windows_and_short_ones_into_a_neighbour():
    windows = plan_windows(60, 10.0, FrameSampler(2, 5, None), Stride(5, "f"))  # 1 s windows every 0.5 s
    assert len(windows) == 11
    labels = [0, 0, 0, 1, 0, 0, 2, 2, 2, 2, 2]
    probs = torch.nn.functional.one_hot(torch.tensor(labels), 3).float() * 0.8 + 0.2 / 3
    names = ["a", "b", "c"]
    segments = segments_of(probs, windows, names)
    assert [(s.name, s.start_s, s.end_s, s.windows) for s in segments] == [
        ("a", 0.0, 1.75, 3), ("b", 1.75, 2.25, 1), ("a", 2.25, 3.25, 2), ("c", 3.25, 6.0, 5)]
    assert segments[0].prob == pytest.approx(0.8 + 0.2 / 3, abs=1e-4)
    merged = segments_of(probs, windows, names, min_length_s=1.0)
    assert [(s.name, s.start_s, s.end_s) for s in merged] == [("a", 0.0, 3.25), ("c", 3.25, 6.0)]
    text = srt_text(merged)
    assert parse_srt(text) == [(0.0, 3.25, f"a ({merged[0].prob:.2f})"), (3.25, 6.0, f"c ({merged[1].prob:.2f})")]
    assert srt_timestamp(3661.5) == "01:01:01,500"
    rows = list(csv.DictReader(io.StringIO(windows_csv(windows, probs, names, top_k=2))))
    assert list(rows[0]) == ["window", "start_s", "end_s", "top1", "top1_prob", "top2", "top2_prob"]
    assert (rows[3]["start_s"], rows[3]["end_s"], rows[3]["top1"]) == ("1.500", "2.500", "b")


# -- the command on the long video ---------------------------------------------------------------


def test_timeline_finds_the_segments_within_the_tolerance(run_folder):
    run, printed = run_folder
    out = run / "predict"  # the checkpoint's run's predict/ folder
    record = json.loads((out / "kitchen_segments.json").read_text())
    window, stride = record["window_s"], record["stride_s"]
    assert window == pytest.approx(8 / FPS, abs=1e-4) and stride == pytest.approx(4 / FPS, abs=1e-4)  # 4 x 2 frames, half
    assert record["class_names"] == CLASSES and record["checkpoint"].endswith("last.ckpt")
    segments = record["segments"]
    assert [s["name"] for s in segments] == [CLASSES[label] for label, _, _ in TRUTH]
    tolerance = max(stride, window / 2)
    for found, (_, first, end) in zip(segments, TRUTH):
        assert abs(found["start_s"] - first / FPS) <= tolerance + 1e-6
        assert abs(found["end_s"] - end / FPS) <= tolerance + 1e-6
        assert found["prob"] > 0.8
    assert record["duration_s"] == pytest.approx(10.0)
    # Each sampled frame decoded once; the throughput printed.
    assert record["decoding"]["frames_decoded"] == record["decoding"]["frames_sampled"] == 150
    assert re.search(r"kitchen\.mp4: 10\.0 s of video in [\d.]+ s \([\d.]+ s of video per second; "
                     rf"{record['windows']} windows, 150 frames decoded once\)", printed)
    assert f"wrote kitchen_windows.csv, kitchen_segments.json, kitchen.srt, kitchen_timeline.png to {out}" in printed

    with open(out / "kitchen_windows.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == record["windows"]
    assert list(rows[0]) == ["window", "start_s", "end_s", "top1", "top1_prob", "top2", "top2_prob"]
    assert float(rows[0]["start_s"]) == 0 and float(rows[-1]["end_s"]) == pytest.approx(10.0)
    for row in rows:
        assert float(row["top1_prob"]) + float(row["top2_prob"]) == pytest.approx(1.0, abs=2e-4)
        middle = (float(row["start_s"]) + float(row["end_s"])) / 2 * FPS
        truth = next(label for label, first, end in TRUTH if first <= middle < end)
        if min(abs(middle - b) for _, b, _ in TRUTH[1:]) > 4:  # a window inside one clip of the truth
            assert row["top1"] == CLASSES[truth]

    cues = parse_srt((out / "kitchen.srt").read_text())
    assert [(a, b) for a, b, _ in cues] == [(s["start_s"], s["end_s"]) for s in segments]
    assert [text for _, _, text in cues] == [f"{s['name']} ({s['prob']:.2f})" for s in segments]

    with Image.open(out / "kitchen_timeline.png") as image:
        assert image.format == "PNG" and image.width > 400 and image.height > 200


def test_timeline_options_stride_smoothing_and_out_folder(tiny_checkpoint, long_video, tmp_path, capsys):
    ckpt, _ = tiny_checkpoint
    out = tmp_path / "timelines"
    code = main([str(ckpt), str(long_video), "--timeline", "--out", str(out), "--stride", "0.2s", "--smooth", "3",
                 "--min-segment", "0.5"])
    assert code == 0
    record = json.loads((out / "kitchen_segments.json").read_text())
    assert record["stride_s"] == pytest.approx(0.2) and record["smooth_windows"] == 3
    assert [s["name"] for s in record["segments"]] == [CLASSES[label] for label, _, _ in TRUTH]
    tolerance = max(0.2, record["window_s"] / 2)
    starts = [s["start_s"] for s in record["segments"]][1:]
    assert all(abs(a - first / FPS) <= tolerance for a, (_, first, _) in zip(starts, TRUTH[1:]))
    assert "kitchen.mp4: 10.0 s of video in" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--timeline", "--stride", "0"], "error: --stride '0': give seconds (2.5 or 2.5s) or frames (16f), above 0"),
    (["--stride", "2"], "error: --stride, --smooth and --min-segment shape a timeline: add --timeline"),
    (["--timeline", "--out", "x.csv"], "--out x.csv: with --timeline, give a folder"),
    (["--timeline", "--features", "f.npy"], "error: --features is per video: leave it out with --timeline"),
])
def test_timeline_option_mistakes_end_in_one_line(argv, message, tmp_path):
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "no.ckpt"), str(tmp_path / "no.mp4"), *argv])
    assert str(stop.value).startswith(message)


# -- the figure, decoding once, memory -----------------------------------------------------------


@pytest.fixture(scope="session")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint[0])


def test_timeline_figure_is_titled_labelled_with_a_probability_colour_bar_and_class_rows(model, long_video):
    timeline = video_timeline(model, str(long_video))
    windows = timeline.windows
    segments = segments_of(timeline.probs, windows, CLASSES)
    fig = timeline_figure(windows.start_s, windows.end_s, timeline.probs, CLASSES,
                          [(s.start_s, s.end_s, s.label, s.prob) for s in segments], title="kitchen.mp4")
    assert fig.get_suptitle() == "kitchen.mp4"
    heat, bars = [a for a in fig.axes if getattr(a, "_colorbar", None) is None]
    assert heat.get_title() == "class probability per window"
    assert bars.get_title().startswith("segments: consecutive windows of one top-1 class")
    for ax in (heat, bars):
        assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "class"
        assert [t.get_text() for t in ax.get_yticklabels()] == CLASSES
    assert heat.get_xlim() == pytest.approx((0.0, 10.0))
    assert len(bars.collections) == len(segments)  # one bar per segment
    (bar,) = colour_bars(fig)
    assert bar_label(bar) == PROBABILITY_UNIT and (bar.norm.vmin, bar.norm.vmax) == (0.0, 1.0)
    assert overlapping_tick_labels(fig) == []


def test_every_sampled_frame_is_decoded_once_and_windows_match_evaluation(model, long_video, monkeypatch):
    import decord

    from dna_video.data.transforms import EvalClipTransform
    from dna_video.data.video import read_frames

    asked: list[int] = []
    original = decord.VideoReader.get_batch

    def counting(self, indices):
        asked.extend(indices)
        return original(self, indices)

    monkeypatch.setattr(decord.VideoReader, "get_batch", counting)
    timeline = video_timeline(model, str(long_video), Stride(2, "f"))  # a window is 8 frames: 4 windows overlap
    windows = timeline.windows
    sampled = np.unique(windows.indices)
    assert windows.indices.size > 3.8 * sampled.size  # each frame in up to 4 windows...
    assert asked == sampled.tolist()  # ...asked of the decoder once, in order
    assert timeline.stats.decoded_frames == sampled.size and timeline.count == len(windows)
    # A window's probabilities are the evaluation's for its frames (resize, 3 crops, mean logits).
    monkeypatch.setattr(decord.VideoReader, "get_batch", original)
    settings = model.settings
    transform = EvalClipTransform(settings.crop_size, settings.num_crops, settings.mean, settings.std)
    for w in (0, 37, len(windows) - 1):
        frames = read_frames(str(long_video), lambda n, fps: windows.indices[w]).frames
        views = transform(torch.from_numpy(frames).permute(0, 3, 1, 2))
        with torch.no_grad():
            expected = mean_view_probs(model.net(views)[None], model.aggregate)[0]
        torch.testing.assert_close(torch.from_numpy(timeline.probs[w]), expected)


def test_memory_is_flat_in_the_video_length(model, long_video, tmp_path):
    from benchmarks.harness import peak_memory

    longer = write_long(tmp_path / "three_times.mp4", repeats=3)
    arrays, tensors, held = {}, {}, {}
    for name, path in (("1x", long_video), ("3x", longer)):
        tracemalloc.start()
        timeline = video_timeline(model, str(path), Stride(16, "f"))
        arrays[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        held[name] = timeline.stats.peak_held_frames
        assert timeline.stats.video_seconds == pytest.approx(10.0 * (3 if name == "3x" else 1))
        tensors[name] = peak_memory(lambda: video_timeline(model, str(path), Stride(16, "f")))
    whole = 900 * 48 * 64 * 3  # the 3x video decoded whole
    # Frames held at once: one window (4 sampled frames) and one decoded chunk (32), whatever the length.
    assert held["1x"] == held["3x"] <= 4 + 32
    # numpy (the decoded chunks) and Python objects: flat, and far below the whole video.
    assert arrays["3x"] < arrays["1x"] * 1.25 + 64 * 1024, arrays
    assert arrays["3x"] < whole / 4, (arrays, whole)
    # torch (frames held, views, the network's activations): the same peak at any length.
    assert tensors["3x"] <= tensors["1x"] * 1.02, tensors


def test_another_decoder_gives_the_same_timeline(tiny_checkpoint, model, long_video):
    decord_timeline = video_timeline(model, str(long_video))
    pyav_timeline = video_timeline(load_model(tiny_checkpoint[0], decoder="pyav"), str(long_video))
    assert pyav_timeline.stats.decoded_frames == decord_timeline.stats.decoded_frames
    np.testing.assert_allclose(pyav_timeline.probs, decord_timeline.probs, atol=2e-3, rtol=0)


def test_the_synthetic_long_video_states_its_truth(tmp_path):
    from dna_video.data.synthetic import SYNTHETIC_CLASSES, write_long_video
    from dna_video.data.video import probe_video

    truth = write_long_video(tmp_path / "long.mp4", [3, 0], clips_per_segment=2, height=32, width=48)
    frames, fps = probe_video(str(tmp_path / "long.mp4"))
    assert [t["name"] for t in truth] == [SYNTHETIC_CLASSES[3], SYNTHETIC_CLASSES[0]]
    assert truth[0]["start_s"] == 0 and truth[0]["end_s"] == truth[1]["start_s"]
    assert truth[1]["end_s"] == pytest.approx(frames / fps, abs=1e-3) and 4 * 40 <= frames <= 4 * 56
