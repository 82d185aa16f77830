"""Every bad input ends in one clear line (issue 25): a 0-byte file or a text file named .mp4
is named with what it is and nothing of FFmpeg's or decord's own log reaches the terminal; a
video smaller than the network's patches is refused with its size and the minimum; a video
shorter than the clip is answered with frames repeated, and counted. In predict (a real
subprocess), analyze, and training's data loading."""

import json
import logging
import os
import subprocess
import sys
import threading
import time

import lightning as L
import numpy as np
import pytest

from analysis_trees import CLASSES, datamodule, write_class_videos
from dna_video.data.eval_settings import EvalSettings
from dna_video.data.video import VideoTooSmallError
from dna_video.prediction.views import load_views
from dna_video.data import FrameSampler, VideoClipDataset, VideoListDataModule, VideoRecord, collate_videos
from dna_video.data.decoder_log import decoder_messages, decoder_reason
from dna_video.data.sampling import short_videos_note
from dna_video.data.transforms import EvalClipTransform
from dna_video.data.video import VideoDecodeError, frame_size, probe_video, read_frames, write_video
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.video import VideoClassifier
from dna_video.training.callbacks.failed_videos import FailedVideoMonitor

# What FFmpeg and decord print on their own: none of it may reach the terminal.
NOISE = ("[mov,mp4", "moov atom", "DECORDError", "video_reader.cc", ".cc:", " @ 0x", "Invalid data found")
TEXT = "hello this is text\n"  # 19 bytes


def frames(n, height=48, width=64, level=128):
    rng = np.random.default_rng(n + height)
    return np.clip(level + rng.normal(0, 20, (n, height, width, 3)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="session")
def bad(tmp_path_factory):
    """A 0-byte .mp4, a text file named .mp4, a 2x2-pixel video, a 3-frame video, a good video."""
    d = tmp_path_factory.mktemp("bad_videos")
    (d / "empty.mp4").write_bytes(b"")
    (d / "text.mp4").write_text(TEXT)
    write_video(str(d / "tiny.mp4"), frames(10, 2, 2))
    write_video(str(d / "three.mp4"), frames(3))
    write_video(str(d / "good.mp4"), frames(10))
    return {name: d / f"{name}.mp4" for name in ("empty", "text", "tiny", "three", "good")}


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """A tiny TimeSformer (patch 8, 4 frames at sampling rate 2: a clip spans 7 frames) after one
    training step, saved by Lightning with its class names and evaluation settings."""
    root = tmp_path_factory.mktemp("bad_videos_model")
    videos = write_class_videos(root / "videos", 1, seed=3)
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    listing = "".join(f"{p.relative_to(root)} {label}\n" for p, label in videos)
    (root / "train.txt").write_text(listing)
    (root / "test.txt").write_text(listing)
    model = VideoClassifier(num_classes=2, num_frames=4, img_size=32,
                            network=TimeSformerSpec(arch="tiny", embed_dim=16, depth=1, num_heads=2, patch_size=8))
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, default_root_dir=str(root))
    trainer.fit(model, datamodule=datamodule(root))
    trainer.save_checkpoint(root / "tiny.ckpt")
    return root / "tiny.ckpt"


def assert_no_decoder_noise(text):
    for mark in NOISE:
        assert mark not in text, f"decoder log {mark!r} reached the terminal:\n{text}"


# ---------------------------------------------------------------------------- predict, analyze


ORDER = ["empty", "text", "tiny", "three", "good"]
STDERR = [  # of predict on the ORDER files
    "WARNING dna_video.tools.predict: cannot read {empty}: empty file (0 bytes)",
    "WARNING dna_video.tools.predict: cannot read {text}: not a video (19 bytes, starts with 'hello this is te')",
    "WARNING dna_video.tools.predict: refused {tiny}: 2x2 pixels, smaller than the model's 8-pixel patches "
    "(at least 8 pixels a side needed)",
    "2 of 5 videos could not be read; 1 of 5 refused as too small for the model (a side under 8 pixels): "
    "each named above",
    "1 video shorter than the clip (7 frames needed): frames repeated: three.mp4 (3 frames)",
]


@pytest.mark.slow
def test_predict_names_each_bad_file_in_one_line_and_counts_short_videos(checkpoint, bad, tmp_path):
    """The command as a user runs it (a subprocess: its whole standard error is checked)."""
    out = tmp_path / "pred.json"
    run = subprocess.run(
        [sys.executable, "-m", "dna_video", "predict", str(checkpoint), *(str(bad[k]) for k in ORDER),
         "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert_no_decoder_noise(run.stderr + run.stdout)
    assert run.stderr.splitlines() == [line.format(**bad) for line in STDERR]
    table = run.stdout.splitlines()
    assert table[0] == "video      top-2 (class probability)" and len(table) == 4
    assert table[1].startswith("three.mp4  ") and table[1].endswith("  (short: 3 of 7 frames, repeated)")
    assert table[2].startswith("good.mp4   ") and "short" not in table[2]
    assert table[3] == f"wrote 2 predictions to {out}"
    data = json.loads(out.read_text())
    assert [(r["path"], r["frames"], r["frames_needed"]) for r in data["predictions"]] == [
        (str(bad["three"]), 3, 7), (str(bad["good"]), 10, 7)]
    assert [f["path"] for f in data["failed"]] == [str(bad[k]) for k in ("empty", "text", "tiny")]
    assert data["failed"][0]["error"] == "empty file (0 bytes)"


def test_predict_with_a_decoding_worker_keeps_the_decoder_quiet_too(checkpoint, bad, caplog, capfd):
    """Decoded in a forked DataLoader worker: its own capture of the decoder's lines."""
    from dna_video.tools.predict import main

    caplog.set_level(logging.WARNING, logger="dna_video")
    assert main([str(checkpoint), *(str(bad[k]) for k in ORDER), "--num-workers", "1"]) == 0
    err = capfd.readouterr().err
    assert_no_decoder_noise(err)
    assert err.splitlines() == STDERR[3:]
    assert [f"WARNING {r.name}: {r.getMessage()}" for r in caplog.records] == [
        line.format(**bad) for line in STDERR[:3]]


def test_analyze_says_what_a_bad_file_is_in_one_line(checkpoint, bad, tmp_path, capfd):
    from dna_video.tools.analyze import main

    expected = {
        "empty": "empty file (0 bytes)",
        "text": "not a video (19 bytes, starts with 'hello this is te')",
        "tiny": "2x2 pixels, smaller than the model's 8-pixel patches (at least 8 pixels a side needed)",
    }
    for name, reason in expected.items():
        with pytest.raises(SystemExit) as stop:
            main(["maps", str(checkpoint), str(bad[name]), "--out", str(tmp_path / name)])
        assert str(stop.value) == f"error: {bad[name]}: {reason}"
        assert not (tmp_path / name).exists()
    assert_no_decoder_noise(capfd.readouterr().err)


# ---------------------------------------------------------------------------- the checks


def test_unreadable_files_say_what_they_are_and_the_decoder_stays_quiet(bad, tmp_path, capfd):
    good = bad["good"].read_bytes()
    (tmp_path / "cut.mp4").write_bytes(good[: len(good) // 2])  # PyAV writes the index last: lost
    (tmp_path / "image.mp4").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    (tmp_path / "notes.avi").write_bytes(("a" + "\u00e9" * 10).encode())  # byte 16 is inside a character
    expected = {
        bad["empty"]: "empty file (0 bytes)",
        bad["text"]: "not a video (19 bytes, starts with 'hello this is te')",
        # decord's FFmpeg says why; PyAV (frame_size) says "Invalid data found when processing input".
        tmp_path / "cut.mp4": f"damaged or truncated mp4/mov file ({len(good) // 2} bytes): ",
        tmp_path / "image.mp4": "not a video (48 bytes, starts with b'\\x89PNG\\r\\n\\x1a\\n\\x00\\x00\\x00\\x00"
                                "\\x00\\x00\\x00\\x00')",
        tmp_path / "notes.avi": "not a video (21 bytes, starts with 'a\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9')",
    }
    for path, reason in expected.items():
        readers = [lambda p: read_frames(p, lambda n, fps: np.arange(n)), probe_video]
        if path.name != "image.mp4":  # FFmpeg reads a PNG's header as a one-frame stream's
            readers.append(frame_size)
        for read in readers:
            with pytest.raises(VideoDecodeError) as caught:
                read(str(path))
            assert caught.value.path == str(path) and caught.value.reason.startswith(reason)
            assert str(caught.value) == f"{path}: {caught.value.reason}"
            if path.name == "cut.mp4" and read is not frame_size:
                assert caught.value.reason.endswith("): moov atom not found")
            elif path.name != "cut.mp4":
                assert caught.value.reason == reason
    missing = tmp_path / "missing.mp4"
    with pytest.raises(VideoDecodeError, match="missing.mp4: No such file or directory"):
        read_frames(str(missing), lambda n, fps: np.arange(n))
    assert capfd.readouterr().err == ""


def test_decoder_lines_are_kept_and_others_pass_through_at_once(capfd):
    with decoder_messages() as said:
        os.write(2, b"[mov,mp4,m4a,3gp,3g2,mj2 @ 0x5610cba2b880] moov atom not found\n")
        os.write(2, b"[19:00:52] /src/video/video_reader.cc:83: ERROR opening: /v/x.mp4, Invalid data found\n")
        os.write(2, b"a warning of ours\n")
        # Passed through while the capture lasts (a hang inside the decoder must not hide it).
        seen, deadline = "", time.monotonic() + 5
        while "a warning of ours" not in seen and time.monotonic() < deadline:
            seen += capfd.readouterr().err
            time.sleep(0.01)
        assert seen == "a warning of ours\n"
    assert said == ["[mov,mp4,m4a,3gp,3g2,mj2 @ 0x5610cba2b880] moov atom not found",
                    "[19:00:52] /src/video/video_reader.cc:83: ERROR opening: /v/x.mp4, Invalid data found"]
    assert decoder_reason("/v/x.mp4", said) == "moov atom not found"
    assert decoder_reason("/v/x.mp4", said[1:]) == "Invalid data found"
    os.write(2, b"[h264 @ 0x1] after the capture\n")  # file descriptor 2 is restored
    assert capfd.readouterr().err == "[h264 @ 0x1] after the capture\n"


def test_a_second_thread_does_not_capture_while_one_does(capfd):
    inner: list[list[str]] = []
    with decoder_messages() as said:
        worker = threading.Thread(target=lambda: inner.append(decoder_messages().__enter__()))
        worker.start()
        worker.join()
        os.write(2, b"[h264 @ 0x2] mine\n")
    assert said == ["[h264 @ 0x2] mine"] and inner == [[]]
    os.write(2, b"still the terminal\n")
    assert capfd.readouterr().err == "still the terminal\n"


def test_a_video_smaller_than_the_patches_is_refused_before_decoding(bad, caplog):
    settings = EvalSettings(num_frames=4, sampling_rate=2, target_fps=None, crop_size=32, num_crops=1)
    caplog.set_level(logging.INFO)
    with pytest.raises(VideoTooSmallError) as caught:
        load_views(str(bad["tiny"]), settings, min_side=8)
    assert str(caught.value) == (f"{bad['tiny']}: 2x2 pixels, smaller than the model's 8-pixel patches "
                                 "(at least 8 pixels a side needed)")
    assert "decord" not in caplog.text  # refused from the header: no decoder fell back
    assert load_views(str(bad["tiny"]), settings, min_side=2).views.shape == (1, 3, 4, 32, 32)
    assert load_views(str(bad["good"]), settings, min_side=48).views.shape == (1, 3, 4, 32, 32)
    with pytest.raises(VideoTooSmallError, match="64x48 pixels.*49-pixel patches"):
        load_views(str(bad["good"]), settings, min_side=49)


def test_frames_needed_is_the_span_past_which_no_index_is_clamped():
    for sampler, fps, needed in [
        (FrameSampler(4, 2, None), 30.0, 7),
        (FrameSampler(8, 32, 30.0), 30.0, 225),  # TimeSformer's 8 x 32 at 30 fps
        (FrameSampler(8, 32, 30.0), 15.0, 113),  # a 15 fps file: stride 16
        (FrameSampler(8, 32, 30.0, mode="uniform"), 30.0, 8),
    ]:
        assert sampler.frames_needed(fps) == needed
        unclamped = sampler.view_indices(needed, fps, 1)[0]
        assert len(set(unclamped.tolist())) == sampler.num_frames and unclamped.max() < needed
        shorter = sampler.view_indices(needed - 1, fps, 1)[0]
        assert shorter.max() == needed - 2  # the last frame stands in for the missing ones
    assert FrameSampler(4, 2, None).view_indices(3, 30.0, 1).tolist() == [[0, 2, 2, 2]]


def test_short_videos_note_counts_and_names_a_few():
    assert short_videos_note([("/d/a.mp4", 3, 7)]) == (
        "1 video shorter than the clip (7 frames needed): frames repeated: a.mp4 (3 frames)")
    many = [(f"/d/v{i}.mp4", 1 + i, 225 - i % 2) for i in range(7)]
    assert short_videos_note(many, max_named=2) == (
        "7 videos shorter than the clip (224-225 frames needed): frames repeated: v0.mp4 (1 frame), "
        "v1.mp4 (2 frames) (+5 more)")


# ---------------------------------------------------------------------------- training data


def test_evaluation_data_names_bad_files_in_one_line_and_lists_short_videos(bad, caplog, capfd):
    sampler = FrameSampler(num_frames=4, sampling_rate=2, target_fps=None)
    records = [VideoRecord(str(bad[k]), 0) for k in ("empty", "text", "three", "good")]
    ds = VideoClipDataset(records, sampler, EvalClipTransform(32, 1, (0.5,) * 3, (0.5,) * 3), train=False)
    caplog.set_level(logging.WARNING)
    batch = collate_videos([ds[i] for i in range(len(records))])
    assert batch["failed_paths"] == [str(bad["empty"]), str(bad["text"])]
    assert batch["short_videos"] == [(str(bad["three"]), 3, 7)]
    assert [r.getMessage() for r in caplog.records] == [
        f"leaving out unreadable video ({bad['empty']}: empty file (0 bytes))",
        f"leaving out unreadable video ({bad['text']}: not a video (19 bytes, starts with 'hello this is te'))",
    ]
    assert_no_decoder_noise(capfd.readouterr().err)


def test_fit_warns_per_epoch_and_split_with_the_count_of_short_videos(bad, tmp_path, caplog, capfd):
    root = bad["good"].parent
    (tmp_path / "classes.txt").write_text("a\nb\n")
    (tmp_path / "train.txt").write_text("good.mp4 0\nthree.mp4 1\ngood.mp4 1\nempty.mp4 0\n")
    (tmp_path / "val.txt").write_text("three.mp4 0\ngood.mp4 1\ntext.mp4 1\n")
    dm = VideoListDataModule(str(root), str(tmp_path / "classes.txt"), str(tmp_path / "train.txt"),
                             str(tmp_path / "val.txt"), num_workers=0, batch_size=4, num_frames=4, sampling_rate=2,
                             target_fps=None, train_short_side=(32, 32), crop_size=32)
    model = VideoClassifier(num_classes=2, num_frames=4, img_size=32,
                            network=TimeSformerSpec(arch="tiny", embed_dim=16, num_heads=2, depth=1))
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[FailedVideoMonitor()])
    caplog.set_level(logging.WARNING, logger="dna_video")
    trainer.fit(model, datamodule=dm)
    warnings = [r.getMessage() for r in caplog.records if r.name == "dna_video.training.callbacks.failed_videos"]
    for epoch in (0, 1):
        assert (f"val epoch {epoch}: 1 video shorter than the clip (7 frames needed): frames repeated: "
                "three.mp4 (3 frames)") in warnings
        assert any(w.startswith(f"train epoch {epoch}: ") and "shorter than the clip (7 frames needed): frames "
                   "repeated: three.mp4 (3 frames)" in w for w in warnings)
        assert f"val epoch {epoch}: 1 unreadable video(s), left out of the metrics: {bad['text']}" in warnings
    assert_no_decoder_noise(capfd.readouterr().err)
