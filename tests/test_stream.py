"""``predict --stream`` (dna_video.prediction.stream, tools.predict.run_live) with the tiny
dark-vs-bright model trained in the tests (conftest's ``tiny_checkpoint``: 4 frames 2 apart, 3
crops of 32; windows of 8 frames every 4).

* a file read at its real frame rate: the frames arrive at their timestamps, and with
  ``--no-drop`` the windows and probabilities are the offline timeline's;
* a deliberately slowed model: windows skipped and frames dropped, both counted (the counts
  checked against the plan), and each answer is still exactly its own window's;
* a source that fails mid-stream (a truncated file) ends in one line; the CSV keeps its rows;
* an HTTP URL (a local server); the live plan against the file's; option mistakes in one line;
* the drop accounting, every branch (held frames evicted unused, frames arriving below the next
  window, ``--no-drop``), with a scripted source and a slow stand-in model, against hand counts;
* a file whose length leaves a tail: the stream answers its timeline's windows, the tail's too.

The ONNX model streaming without torch: ``tests/test_onnx_runtime.py`` (its exported model).
"""

from __future__ import annotations

import csv
import functools
import http.server
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest

from dna_video.prediction.annotate import bar_rows
from dna_video.prediction.stream import LiveCsv, LivePlan, LiveWindow, display_name, stream_stem
from dna_video.prediction.timeline import video_timeline
from dna_video.prediction.torch_backend import TorchModel, load_model
from dna_video.prediction.windows import Stride, plan_windows
from dna_video.data.eval_settings import EvalSettings
from dna_video.data.sampling import FrameSampler
from dna_video.data.video import write_video
from dna_video.tools.predict import main
from test_timeline import FPS, long_frames

# Windows of the tiny model: 8 frames (4 sampled, 2 apart), every 4 frames. 8 + 4 m frames
# leave no tail, so the file's timeline has exactly the live plan's windows.
SPAN, STRIDE = 8, 4
SHORT = [(0, 0, 24), (1, 24, 48)]  # 48 frames, 1.6 s: dark then bright
LONG = [(0, 0, 30), (1, 30, 60), (0, 60, 88)]  # 88 frames, 2.9 s


def write(path: Path, plan, faststart: bool = False) -> Path:
    write_video(str(path), long_frames(plan), fps=FPS, faststart=faststart)
    return path


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="session")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint[0])


@pytest.fixture(scope="session")
def long_video(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("stream") / "hall.mp4", LONG, faststart=True)


@pytest.fixture(scope="session")
def offline(model, long_video):
    """The file's timeline (decoded at once, decord), the reference of every live answer."""
    timeline = video_timeline(model, str(long_video))
    assert len(timeline.windows) == (88 - SPAN) // STRIDE + 1 == timeline.count
    return timeline


def assert_rows_are_the_windows(rows, timeline, tolerance=6e-5):
    """Each CSV row is the window its number names: times, top-1 and its probability (4 decimals)."""
    for row in rows:
        w = int(row["window"])
        assert float(row["start_s"]) == pytest.approx(timeline.windows.start_s[w], abs=5e-4)
        assert float(row["end_s"]) == pytest.approx(timeline.windows.end_s[w], abs=5e-4)
        probs = timeline.probs[w]
        assert row["top1"] == timeline.class_names[int(probs.argmax())]
        assert float(row["top1_prob"]) == pytest.approx(float(probs.max()), abs=tolerance)


# -- the live plan (no model) --------------------------------------------------------------------


@pytest.mark.parametrize("sampler, fps, stride", [
    (FrameSampler(4, 2, None), 30.0, None),
    (FrameSampler(8, 32, 30.0), 25.0, None),  # 26.67 file frames a step
    (FrameSampler(8, 5, 30.0), 29.97, Stride(0.7)),
    (FrameSampler(3, 4, None), 30.0, Stride(5, "f")),
])
def test_the_live_plan_is_the_files_plan_laid_out_as_frames_come(sampler, fps, stride):
    plan = LivePlan(sampler, fps, stride)
    frames = 2000
    windows = plan_windows(frames, fps, sampler, stride)
    regular = [w for w in range(len(windows)) if windows.starts[w] == pytest.approx(w * windows.stride)]
    for w in regular:
        np.testing.assert_array_equal(plan.indices(w), windows.indices[w])
        assert plan.start_s(w) == pytest.approx(windows.start_s[w])
        assert plan.end_s(w) == pytest.approx(windows.end_s[w])
    # complete(latest): the windows whose last sampled frame is in, counted by hand.
    for latest in [-1, 0, 5, 57, 100, 999, 1500]:
        assert plan.complete(latest) == sum(1 for w in regular if windows.indices[w, -1] <= latest)
    # wanted(i): sampled by some window; up to the last regular window's first frame every
    # window that can sample a frame is one of the file's regular windows.
    limit = int(windows.indices[regular[-1], 0])
    sampled = {i for i in windows.indices[regular].ravel().tolist() if i <= limit}
    assert [i for i in range(limit + 1) if plan.wanted(i)] == sorted(sampled)


def test_stream_names_and_passwords():
    assert stream_stem("/videos/kitchen.mp4") == "kitchen" and stream_stem("/dev/video0") == "video0"
    assert stream_stem("rtsp://user:secret@cam.local:554/live/ch1") == "cam.local_live_ch1"
    assert stream_stem("http://127.0.0.1:8000/hall.mp4") == "127.0.0.1_hall"
    assert display_name("rtsp://user:secret@cam.local:554/live") == "rtsp://user@cam.local:554/live"
    assert display_name("/dev/video0") == "/dev/video0"


def test_live_csv_rows_are_on_disk_as_soon_as_written(tmp_path):
    """Each row is flushed when written: what a killed run leaves is every row written so far."""
    rows = LiveCsv(tmp_path / "a_live.csv", ["Dark", "Bright"], top_k=2)
    rows.write(LiveWindow(0, 0.0, 0.267, np.array([0.9, 0.1], np.float32), 0.0123))
    on_disk = (tmp_path / "a_live.csv").read_text().splitlines()  # read while the file is still open
    assert on_disk == ["window,start_s,end_s,top1,top1_prob,top2,top2_prob,latency_ms",
                       "0,0.000,0.267,Dark,0.9000,Bright,0.1000,12.3"]
    rows.close()


# -- streams -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_file_streamed_in_real_time_gives_the_offline_timeline(tiny_checkpoint, model, tmp_path, capsys):
    """Default pacing of a file: real time. The reading takes the video's length, every frame
    arrives at its timestamp; with --no-drop the answers are the offline timeline's windows
    and probabilities; --annotate writes the source's frames with the label band."""
    video = write(tmp_path / "desk.mp4", SHORT)
    out = tmp_path / "live"
    started = time.perf_counter()
    assert main([str(tiny_checkpoint[0]), str(video), "--stream", "--no-drop", "--annotate", "--out", str(out)]) == 0
    wall = time.perf_counter() - started
    printed = capsys.readouterr().out
    record = json.loads((out / "desk_live.json").read_text())
    duration = (48 - 1) / FPS  # from the first frame's timestamp to the last's
    assert record["speed"] == 1.0 and record["frames_read"] == 48
    assert duration - 0.02 <= record["seconds"] <= duration + 1.5 and wall >= duration
    timeline = video_timeline(model, str(video))
    rows = read_rows(out / "desk_live.csv")
    assert [int(r["window"]) for r in rows] == list(range(len(timeline.windows))) == list(range(11))
    assert_rows_are_the_windows(rows, timeline)
    assert record["windows"] == 11 and record["skipped_windows"] == 0 and record["dropped_frames"] == 0
    latencies = [float(r["latency_ms"]) for r in rows]
    assert record["latency"]["median_ms"] == pytest.approx(float(np.median(latencies)), abs=0.1)
    assert "latency from a window's last frame to its prediction: median" in printed
    assert "95th percentile" in printed and "the source ended after 48 frames" in printed
    # The annotated copy: every frame, the source's size and rate, the band on each.
    with av.open(str(out / "desk_annotated.mp4")) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
        assert float(stream.average_rate) == FPS
    assert len(frames) == 48 and frames[0].shape == (48, 64, 3)
    band = np.stack(frames)[:, 1]  # the band's top row: its colour, whatever the frame below
    assert np.abs(band.astype(int) - 16).max() <= 12
    # What a viewer saw: no bar before the first answer (frame 6 completes window 0), a bar at the end.
    bar = [frame[(bar_rows(48).start + bar_rows(48).stop) // 2] for frame in (frames[0], frames[-1])]
    green = [int(((row[:, 1] > 150) & (row[:, 0] < 110)).sum()) for row in bar]
    assert green[0] == 0 and green[1] > 40


@pytest.mark.slow
def test_a_slow_model_skips_windows_counts_drops_and_answers_each_window(tiny_checkpoint, long_video, offline,
                                                                          tmp_path, capsys, monkeypatch):
    """A model 3x slower than the windows come: the newest complete window is taken, the others
    skipped; the counts are the plan's (independent count below), every row is its own window."""
    original = TorchModel.probs_of

    def slow(self, windows):
        time.sleep(0.2)  # windows come every 4 frames: 67 ms at 2x real time
        return original(self, windows)

    monkeypatch.setattr(TorchModel, "probs_of", slow)
    out = tmp_path / "live"
    assert main([str(tiny_checkpoint[0]), str(long_video), "--stream", "--speed", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    record = json.loads((out / "hall_live.json").read_text())
    rows = read_rows(out / "hall_live.csv")
    answered = [int(r["window"]) for r in rows]
    assert answered == sorted(set(answered)) and len(answered) == record["windows"]
    total = len(offline.windows)
    assert answered[-1] == total - 1  # the last window is answered: the newest when the source ends
    assert record["skipped_windows"] == total - len(answered) > 0
    # Dropped: sampled frames of the windows up to the last answered that no answered window had.
    sampled = set(offline.windows.indices[: answered[-1] + 1].ravel().tolist())
    used = set(offline.windows.indices[answered].ravel().tolist())
    assert record["dropped_frames"] == len(sampled - used) > 0
    assert (f"dropped {record['dropped_frames']} sampled frames: {record['skipped_windows']} of {total} windows "
            "skipped") in printed
    assert_rows_are_the_windows(rows, offline)


@pytest.mark.slow
def test_a_source_failing_mid_stream_ends_in_one_line_and_keeps_its_rows(tiny_checkpoint, long_video, offline,
                                                                          tmp_path, capsys):
    data = long_video.read_bytes()
    cut = tmp_path / "cut.mp4"  # moov first (faststart): the frames before the cut decode, then an error
    cut.write_bytes(data[: len(data) * 6 // 10])
    out = tmp_path / "live"
    assert main([str(tiny_checkpoint[0]), str(cut), "--stream", "--no-drop", "--speed", "0", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    failed = [line for line in captured.err.splitlines() if "the source failed" in line]
    assert len(failed) == 1
    record = json.loads((out / "cut_live.json").read_text())
    assert 0 < record["frames_read"] < 88 and record["ended"].startswith("failed: ")
    rows = read_rows(out / "cut_live.csv")
    assert failed[0].startswith(f"{cut}: the source failed after {record['frames_read']} frames")
    assert f"the {len(rows)} windows answered before are in cut_live.csv" in failed[0]
    # Every window whose frames were read before the failure was answered, and is the intact file's.
    assert [int(r["window"]) for r in rows] == list(range(LivePlan(FrameSampler(4, 2, None), FPS).complete(
        record["frames_read"] - 1)))
    assert len(rows) > 0
    assert_rows_are_the_windows(rows, offline)


def test_a_url_source_streams_over_http(tiny_checkpoint, long_video, offline, tmp_path):
    """A local HTTP server: the URL path of PyAV, the files named after host and path."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(long_video.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{long_video.name}"
        out = tmp_path / "live"
        assert main([str(tiny_checkpoint[0]), url, "--stream", "--no-drop", "--out", str(out)]) == 0
    finally:
        server.shutdown()
    record = json.loads((out / "127.0.0.1_hall_live.json").read_text())
    assert record["speed"] == 0.0 and record["frames_read"] == 88  # a URL is not paced by default
    rows = read_rows(out / "127.0.0.1_hall_live.csv")
    assert len(rows) == len(offline.windows)
    assert_rows_are_the_windows(rows, offline)


@pytest.mark.parametrize("extra, message", [
    (["--stream", "--timeline"], "--stream already slides the window"),
    (["--speed", "2"], "--speed shape a live stream: add --stream"),
    (["--no-drop", "--input-format", "v4l2"], "--no-drop, --input-format shape a live stream: add --stream"),
    (["--annotate"], "--annotate draws a timeline's or a stream's labels on the video: add --timeline or --stream"),
    (["--stream", "--smooth", "3", "--decoder", "pyav"], "--smooth, --decoder cannot apply to a live stream"),
    (["--stream", "--input-option", "rtsp_transport"], "--input-option 'rtsp_transport': give KEY=VALUE"),
    (["--stream", "--speed", "-1"], "must be 0 (no pacing) or above"),
])
def test_stream_option_mistakes_end_in_one_line(extra, message, long_video, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "any.ckpt"), str(long_video), *extra])
    said = str(stop.value.code) if isinstance(stop.value.code, str) else capsys.readouterr().err
    assert message in said


def test_a_stream_of_two_sources_and_a_source_that_cannot_open_are_named(tiny_checkpoint, long_video, tmp_path):
    with pytest.raises(SystemExit, match="--stream reads one source, got 2"):
        main([str(tiny_checkpoint[0]), str(long_video), str(long_video), "--stream"])
    with pytest.raises(SystemExit, match="no such file: .*missing.mp4"):
        main([str(tiny_checkpoint[0]), str(tmp_path / "missing.mp4"), "--stream"])
    # A refused connection, named without the URL's password.
    with pytest.raises(SystemExit) as stop:
        main([str(tiny_checkpoint[0]), "rtsp://viewer:secret@127.0.0.1:9/live", "--stream", "--out", str(tmp_path)])
    assert str(stop.value.code) == "error: cannot open rtsp://viewer@127.0.0.1:9/live: Connection refused"


# -- the drop accounting, branch by branch (a scripted source, a slow stand-in model) ------------

# The tiny model's plan (4 frames 2 apart, windows every 4 at 30 fps): window w samples frames
# 4w, 4w + 2, 4w + 4, 4w + 6 and ends at frame 4w + 8. Each script is the frames that arrive
# while the model answers one window: a model as slow as the script makes it, deterministically.
# Expected, from the plan by hand: answered windows; skipped; dropped, split into the held frames
# evicted unused (kept for a window that was then skipped) and the frames that arrived already
# below the next window's first (never prepared); frames read; frames after the last window's end.
SCRIPTS = {
    # 0-5 wait for window 0; 6-13 complete 0 and 1 at once: 0 skipped, its held 0 and 2 evicted.
    "evicted held frames": ([range(0, 6), range(6, 14), range(14, 18)], True,
                            dict(answered=[1, 2], skipped=1, evicted=2, below_floor=0, read=18, after=2)),
    # 0-17 complete windows 0-2 at once: 0 and 1 skipped, their frames 0-6 arrive below window 2's first.
    "frames below the floor": ([range(0, 18), range(18, 20)], True,
                               dict(answered=[2, 3], skipped=2, evicted=0, below_floor=4, read=20, after=0)),
    # Both, twice: 0, 2, 4 held then evicted, 6 below; 16 held then evicted, 18 below.
    "both": ([range(0, 6), range(6, 18), range(18, 30), range(30, 34)], True,
             dict(answered=[2, 5, 6], skipped=4, evicted=4, below_floor=2, read=34, after=2)),
    # --no-drop: the same source, every window answered in order, nothing dropped.
    "--no-drop": ([range(0, 6), range(6, 18), range(18, 30), range(30, 34)], False,
                  dict(answered=list(range(7)), skipped=0, evicted=0, below_floor=0, read=34, after=2)),
}


class ScriptedReader:
    """A :class:`~dna_video.prediction.stream.FrameReader` stand-in: each ``take()`` hands on the
    next batch of the script (the frames ``keep`` accepts, in order); frame i's pixels all equal i."""

    def __init__(self, batches, keep, name="scripted"):
        self.batches, self.keep, self.name = [list(b) for b in batches], keep, name
        self.frames_read, self.error, self.stopped = 0, None, False
        self.started_at = self.ended_at = 0.0

    def start(self):
        self.started_at = time.perf_counter()

    def take(self, wait_s=0.5):
        batch = self.batches.pop(0) if self.batches else []
        self.frames_read += len(batch)
        arrived = [SimpleNamespace(index=i, arrival=time.perf_counter(), frame=np.full((2, 2, 3), i, np.uint8))
                   for i in batch if self.keep(i)]
        if not self.batches:
            self.ended_at = time.perf_counter()
        return arrived, not self.batches

    def stop(self):
        self.stopped = True

    def join(self, timeout=None):
        pass


class StandIn:
    """A backend stand-in: frames prepared as they are, each window answered with its frames noted."""

    settings = EvalSettings(num_frames=4, sampling_rate=2, target_fps=None, crop_size=2, num_crops=1)
    class_names, source, patch_size = ["a", "b"], "stand-in", 0

    def __init__(self):
        self.windows = []

    def prepare(self, frames):
        return frames

    def probs_of(self, windows):
        self.windows += [[int(frame[0, 0, 0]) for frame in window] for window in windows]
        return np.tile([[0.75, 0.25]], (len(windows), 1))


def expected_dropped(plan, answered):
    """Sampled frames of the windows up to the last answered that no answered window had."""
    sampled = {i for w in range(answered[-1] + 1) for i in plan.indices(w).tolist()}
    return len(sampled - {i for w in answered for i in plan.indices(w).tolist()})


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_the_drop_accounting_of_every_branch_against_the_plan(case, monkeypatch, tmp_path, capsys):
    """The stream as ``predict --stream`` runs it (:func:`~dna_video.tools.predict.run_live`), its
    source and model replaced: the printed lines and the JSON against the counts made by hand
    above, the dropped frames against an independent count from the plan, and each answer is
    its own window's frames."""
    import dna_video.tools.predict as command

    batches, drop, want = SCRIPTS[case]
    plan = LivePlan(StandIn.settings.sampler, FPS)
    assert expected_dropped(plan, want["answered"]) == want["evicted"] + want["below_floor"]
    container = SimpleNamespace(streams=SimpleNamespace(video=[SimpleNamespace(average_rate=FPS, guessed_rate=None,
                                                                               frames=0)]))
    monkeypatch.setattr(command, "open_source", lambda *args, **kwargs: container)
    monkeypatch.setattr(command, "FrameReader", lambda container, name, keep, speed, on_frame: ScriptedReader(
        batches, keep, name))
    model = StandIn()
    argv = ["stand-in.ckpt", "rtsp://scripted/live", "--stream", "--out", str(tmp_path)]
    args = command.parser().parse_args(argv + ([] if drop else ["--no-drop"]))
    command.check_arguments(args)
    assert command.run_live(args, model, tmp_path) == 0
    printed = capsys.readouterr().out
    record = json.loads((tmp_path / "scripted_live_live.json").read_text())
    dropped = want["evicted"] + want["below_floor"]
    assert model.windows == [plan.indices(w).tolist() for w in want["answered"]]
    assert [int(r["window"]) for r in read_rows(tmp_path / "scripted_live_live.csv")] == want["answered"]
    assert (record["windows"], record["skipped_windows"], record["dropped_frames"]) == (
        len(want["answered"]), want["skipped"], dropped)
    assert (record["frames_read"], record["frames_after_last_window"]) == (want["read"], want["after"])
    total = len(want["answered"]) + want["skipped"]
    said = f"dropped {dropped} sampled frames: {want['skipped']} of {total} windows skipped"
    assert (said in printed) == bool(want["skipped"])
    assert ("no frame dropped: the model kept up" in printed) == (drop and not want["skipped"])
    assert f"after {want['read']} frames" in printed and f"{len(want['answered'])} windows answered" in printed
    after = f"the last {want['after']} frames ({want['after'] / FPS:.2f} s) came after the last whole window"
    assert (after in printed) == bool(want["after"])


# -- a file streamed: its timeline's windows, the tail included ------------------------------------


def test_a_file_streamed_answers_its_timelines_windows_with_the_tail(tiny_checkpoint, tmp_path, capsys):
    """50 frames: windows of 8 every 4 start at 0, 4, ..., 40 and leave frames 48-49; the file's
    timeline adds a window ending at its end (42-50). The stream of the file answers the same
    12 windows, at the same times, and nothing comes after its last."""
    video = write(tmp_path / "porch.mp4", [(0, 0, 26), (1, 26, 50)])
    starts = [*range(0, 41, 4), 42]  # by hand
    assert main([str(tiny_checkpoint[0]), str(video), "--timeline", "--out", str(tmp_path / "timeline")]) == 0
    assert main([str(tiny_checkpoint[0]), str(video), "--stream", "--no-drop", "--speed", "0", "--out",
                 str(tmp_path / "live")]) == 0
    printed = capsys.readouterr().out
    timeline = read_rows(tmp_path / "timeline" / "porch_windows.csv")
    live = read_rows(tmp_path / "live" / "porch_live.csv")
    assert [(r["start_s"], r["end_s"]) for r in live] == [(r["start_s"], r["end_s"]) for r in timeline] == [
        (f"{s / FPS:.3f}", f"{(s + SPAN) / FPS:.3f}") for s in starts]
    assert [r["top1"] for r in live] == [r["top1"] for r in timeline]
    for a, b in zip(live, timeline):
        assert float(a["top1_prob"]) == pytest.approx(float(b["top1_prob"]), abs=2e-4)
    record = json.loads((tmp_path / "live" / "porch_live.json").read_text())
    assert record["windows"] == 12 and record["frames_read"] == 50 and record["frames_after_last_window"] == 0
    assert "12 windows to the end of the file" in printed and "came after the last whole window" not in printed
