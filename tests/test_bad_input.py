"""Bad input at run time, with real broken files: zero-length, truncated, corrupt and
non-video files are named, replaced in training (label travelling with the clip), left out
of evaluation, counted per epoch; files that report more frames than decode are sampled
within the decodable ones."""

import logging
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from video_trees import (
    clip_frames,
    corrupt_header,
    count_frames_pyav,
    damaged_tail,
    not_a_video,
    truncated,
    write_avi,
    zero_length,
)

from dna_video.training.callbacks.failed_videos import FailedVideoMonitor
from dna_video.data import FrameSampler, VideoClipDataset, VideoListDataModule, VideoRecord, collate_videos
from dna_video.data.transforms import EvalClipTransform, TrainClipTransform
from dna_video.data.video import VideoDecodeError, read_frames, write_video
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.video import VideoClassifier

BROKEN = ["zero_length", "truncated_mp4", "truncated_avi", "corrupt_header", "png_as_mp4", "text_as_avi"]


@pytest.fixture(scope="session")
def files(tmp_path_factory):
    """Two good videos and one broken file of every kind, with the real files' names."""
    d = tmp_path_factory.mktemp("bad")
    good_mp4, good_avi = d / "Walk_p03_r00_v00_c01.mp4", d / "S001C001P001R001A001_rgb.avi"
    write_video(str(good_mp4), clip_frames(1))
    write_avi(good_avi, clip_frames(2))
    out = {"good_mp4": good_mp4, "good_avi": good_avi}
    out["zero_length"] = zero_length(d / "Walk_p04_r00_v00_c01.mp4")
    out["truncated_mp4"] = truncated(d / "Walk_p06_r00_v00_c01.mp4", good_mp4, 0.6)  # index lost
    out["truncated_avi"] = truncated(d / "S001C002P001R001A001_rgb.avi", good_avi, 0.3)
    out["corrupt_header"] = corrupt_header(d / "Walk_p07_r00_v00_c01.mp4", good_mp4)
    out["png_as_mp4"] = not_a_video(d / "Walk_p09_r00_v00_c01.mp4")
    out["text_as_avi"] = d / "S001C003P001R001A001_rgb.avi"
    out["text_as_avi"].write_text("not a video")
    out["damaged_tail"] = damaged_tail(d / "Walk_p12_r00_v00_c01.mp4", clip_frames(3, n=40), keep=0.7)
    return out


def all_frames(n, fps):
    return np.arange(n)


@pytest.mark.parametrize("kind", BROKEN)
def test_broken_files_raise_a_decode_error_naming_the_file(files, kind):
    with pytest.raises(VideoDecodeError, match=files[kind].name):
        read_frames(str(files[kind]), all_frames)


def test_a_file_reporting_more_frames_than_decode_is_sampled_within_the_decodable_ones(files, caplog):
    path = str(files["damaged_tail"])
    import decord

    reported = len(decord.VideoReader(path, num_threads=1))
    decodable = count_frames_pyav(files["damaged_tail"])
    assert reported == 40 and 0 < decodable < 40  # the file lies about its length
    sampler = FrameSampler(num_frames=8, sampling_rate=8, target_fps=None)
    with caplog.at_level(logging.WARNING):
        out = read_frames(path, lambda n, fps: sampler.view_indices(n, fps, 1))
    assert out.num_frames == decodable
    assert f"reports 40 frames but only the first {decodable} decode" in caplog.text
    # The frames are the decodable frames at the sampler's indices for that count: compare
    # with an independent decode of the original content.
    idx = sampler.view_indices(decodable, 30.0, 1)[0]
    assert idx.max() < decodable
    written = clip_frames(3, n=40)
    err = np.abs(out.frames.astype(float) - written[idx].astype(float)).mean(axis=(1, 2, 3))
    assert err.max() < 6, err
    # The count is remembered: no second warning, same frames.
    caplog.clear()
    again = read_frames(path, lambda n, fps: sampler.view_indices(n, fps, 1))
    assert np.array_equal(again.frames, out.frames) and "reports 40" not in caplog.text


def dataset(records, train, **kwargs):
    sampler = FrameSampler(num_frames=4, sampling_rate=2, target_fps=None)
    if train:
        transform = TrainClipTransform((32, 32), 32, False, (0.5,) * 3, (0.5,) * 3)
    else:
        transform = EvalClipTransform(32, 1, (0.5,) * 3, (0.5,) * 3)
    return VideoClipDataset(records, sampler, transform, train=train, **kwargs)


def test_training_replaces_broken_files_and_the_label_travels_with_the_clip(files, caplog):
    good = [VideoRecord(str(files["good_mp4"]), 7), VideoRecord(str(files["good_avi"]), 8)]
    broken = [VideoRecord(str(files[k]), i) for i, k in enumerate(BROKEN)]
    ds = dataset(broken + good, train=True, max_retries=50)
    torch.manual_seed(0)
    caplog.set_level(logging.WARNING)
    for index, record in enumerate(broken):
        sample = ds[index]
        assert sample["path"] in {g.path for g in good}
        assert sample["label"] == {g.path: g.label for g in good}[sample["path"]]
        assert sample["failed"] == len(sample["failed_paths"]) >= 1
        assert sample["failed_paths"][0] == record.path
        assert set(sample["failed_paths"]) <= {b.path for b in broken}
        assert Path(record.path).name in caplog.text
    # Only broken files: a clear error after max_retries + 1 tries, never an endless loop.
    with pytest.raises(VideoDecodeError, match="4 unreadable videos in a row"):
        dataset(broken, train=True, max_retries=3)[0]


def test_evaluation_leaves_broken_files_out_and_counts_them(files):
    records = [VideoRecord(str(files["good_mp4"]), 1)] + [VideoRecord(str(files[k]), 0) for k in BROKEN]
    ds = dataset(records, train=False)
    batch = collate_videos([ds[i] for i in range(len(records))])
    assert batch["video"].shape == (1, 1, 3, 4, 32, 32) and batch["label"].tolist() == [1]
    assert batch["failed"] == len(BROKEN) and batch["failed_paths"] == [str(files[k]) for k in BROKEN]
    only_broken = collate_videos([ds[1], ds[2]])
    assert only_broken["video"] is None and only_broken["failed"] == 2


class CountFailed(L.Callback):
    """Sums the unreadable files the loaders reported, independently of FailedVideoMonitor."""

    def __init__(self):
        self.train = self.val = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.train += batch["failed"]

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking:
            self.val += batch["failed"]


def test_fit_reports_unreadable_videos_at_the_end_of_each_epoch(files, tmp_path, caplog):
    classes = tmp_path / "classes.txt"
    classes.write_text("a\nb\n")
    names = {k: files[k].name for k in files}
    good = [f"{names['good_mp4']} 0", f"{names['good_avi']} 1", f"{names['damaged_tail']} 0"]
    (tmp_path / "train.txt").write_text("\n".join(good * 2 + [f"{names['zero_length']} 1", f"{names['png_as_mp4']} 0"]))
    (tmp_path / "val.txt").write_text("\n".join(good + [f"{names['truncated_mp4']} 0", f"{names['text_as_avi']} 1"]))
    dm = VideoListDataModule(
        str(files["good_mp4"].parent), str(classes), str(tmp_path / "train.txt"), str(tmp_path / "val.txt"),
        num_workers=0, batch_size=4, num_frames=2, sampling_rate=2, train_short_side=(32, 32), crop_size=32,
    )
    model = VideoClassifier(num_classes=2, num_frames=2, img_size=32,
                            network=TimeSformerSpec(arch="tiny", drop_path_rate=0.0, embed_dim=32, num_heads=2, depth=1))
    counter = CountFailed()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[counter, FailedVideoMonitor()])
    caplog.set_level(logging.WARNING, logger="dna_video")
    trainer.fit(model, datamodule=dm)
    metrics = trainer.callback_metrics
    # Validation: each broken file once per epoch, left out: 2 per epoch, exact.
    assert counter.val == 4 and metrics["val/failed_videos"].item() == 2
    # Training: every broken record once per epoch, plus any broken replacement drawn.
    assert counter.train >= 4 and metrics["train/failed_videos"].item() >= 2
    assert "val epoch 0: 2 unreadable video(s), left out of the metrics" in caplog.text
    assert "val epoch 1: 2 unreadable video(s)" in caplog.text
    assert "train epoch 1:" in caplog.text and "replaced by other videos" in caplog.text
    assert names["zero_length"] in caplog.text and names["text_as_avi"] in caplog.text
