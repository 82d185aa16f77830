"""Frame sampling, decord decoding of real files, clip transforms, datasets, metrics."""

import json

import numpy as np
import pytest
import torch

from dna_video.data import FrameSampler, SyntheticSmarthome, VideoClipDataset, VideoRecord, collate_videos
from dna_video.data.smarthome import parse_smarthome_name
from dna_video.data.synthetic import SYNTHETIC_CLASSES, generate_synthetic_dataset, render_video
from dna_video.data.transforms import EvalClipTransform, TrainClipTransform, spatial_crops
from dna_video.data.video import VideoDecodeError, probe_video, read_frames, write_video
from dna_video.tasks.metrics import MeanClassAccuracy

# ---------------------------------------------------------------------------- sampling


def test_clip_indices_adapt_the_stride_to_the_file_fps():
    s = FrameSampler(num_frames=4, sampling_rate=2, target_fps=30)
    # 60 fps file: 2 frames at 30 fps = 4 frames of the file; centred in 100 frames:
    # span 16, start (100 - 16) / 2 = 42.
    assert s.view_indices(100, 60.0, 1).tolist() == [[42, 46, 50, 54]]
    # 30 fps file: stride 2, span 8, start 46.
    assert s.view_indices(100, 30.0, 1).tolist() == [[46, 48, 50, 52]]
    # Three clips from the first to the last possible start (0, 46, 92).
    assert s.view_indices(100, 30.0, 3).tolist() == [[0, 2, 4, 6], [46, 48, 50, 52], [92, 94, 96, 98]]
    # A file without a usable frame rate (NaN, 0, None): the stride counts the file's frames.
    for fps in (float("nan"), 0.0, None):
        assert s.view_indices(100, fps, 1).tolist() == [[46, 48, 50, 52]]


def test_short_videos_clamp_or_loop():
    clamp = FrameSampler(num_frames=4, sampling_rate=3, target_fps=None)
    loop = FrameSampler(num_frames=4, sampling_rate=3, target_fps=None, short_video="loop")
    assert clamp.view_indices(7, 30.0, 1).tolist() == [[0, 3, 6, 6]]
    assert loop.view_indices(7, 30.0, 1).tolist() == [[0, 3, 6, 2]]
    rng = np.random.default_rng(0)
    assert clamp.train_indices(7, 30.0, rng).tolist() == [0, 3, 6, 6]


def test_random_training_clips_stay_inside_and_keep_the_stride():
    s = FrameSampler(num_frames=8, sampling_rate=4, target_fps=30)
    rng = np.random.default_rng(0)
    starts = set()
    for _ in range(200):
        idx = s.train_indices(50, 30.0, rng)
        assert idx.min() >= 0 and idx.max() <= 49
        assert set(np.diff(idx).tolist()) == {4}
        starts.add(int(idx[0]))
    assert starts == set(range(0, 18))  # every start in [0, 50 - 8 * 4) occurs


def test_uniform_sampling_spreads_over_the_video():
    s = FrameSampler(num_frames=4, mode="uniform")
    assert s.view_indices(40, 30.0, 1).tolist() == [[5, 15, 25, 35]]
    idx = s.train_indices(40, 30.0, np.random.default_rng(1))
    assert [i // 10 for i in idx] == [0, 1, 2, 3]


def test_sampler_rejects_bad_options():
    with pytest.raises(ValueError, match="sampling mode"):
        FrameSampler(mode="dense")
    with pytest.raises(ValueError, match="short_video"):
        FrameSampler(short_video="pad")


# ---------------------------------------------------------------------------- decoding


def test_decoding_a_generated_mp4_returns_the_written_frames(tmp_path):
    frames = render_video(label=3, seed=7)
    path = tmp_path / "Move.Circle_p03_r00_v01_c01.mp4"
    write_video(str(path), frames, fps=30.0)
    assert probe_video(str(path)) == (len(frames), 30.0)
    decoded = read_frames(str(path), lambda n, fps: np.arange(n))
    assert decoded.frames.shape == frames.shape
    mse = ((decoded.frames.astype(np.float64) - frames.astype(np.float64)) ** 2).mean()
    assert 10 * np.log10(255**2 / mse) > 30  # PSNR in dB: H.264 at crf 18 keeps the content
    # Each decoded frame is closest to the frame written at the same index (order kept).
    dist = ((decoded.frames[:, None].astype(np.float32) - frames[None].astype(np.float32)) ** 2).mean(axis=(2, 3, 4))
    assert dist.argmin(axis=1).tolist() == list(range(len(frames)))


def test_read_frames_decodes_each_index_once_and_keeps_the_sampler_layout(tmp_path):
    frames = np.stack([np.full((48, 64, 3), 10 * i, np.uint8) for i in range(20)])
    path = tmp_path / "ramp.mp4"
    write_video(str(path), frames)
    out = read_frames(str(path), lambda n, fps: np.array([[3, 1, 3], [19, 0, 1]]))
    levels = out.frames.reshape(6, -1).mean(axis=1) / 10
    assert np.round(levels).astype(int).tolist() == [3, 1, 3, 19, 0, 1]


def test_unreadable_files_raise_a_decode_error_naming_the_file(tmp_path):
    bad = tmp_path / "not_a_video.mp4"
    bad.write_bytes(b"this is text, not a video")
    with pytest.raises(VideoDecodeError, match="not_a_video.mp4"):
        read_frames(str(bad), lambda n, fps: np.arange(n))
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(VideoDecodeError, match="empty.mp4"):
        probe_video(str(empty))


# ---------------------------------------------------------------------------- transforms


def test_train_transform_applies_the_same_crop_and_flip_to_every_frame():
    torch.manual_seed(0)
    frame = torch.randint(0, 256, (3, 72, 96), dtype=torch.uint8)
    clip = frame.expand(6, -1, -1, -1).clone()
    t = TrainClipTransform((64, 80), 48, hflip=True, mean=(0.5,) * 3, std=(0.25,) * 3)
    for _ in range(5):
        out = t(clip)
        assert out.shape == (3, 6, 48, 48) and out.dtype == torch.float32
        for i in range(1, 6):
            assert torch.equal(out[:, i], out[:, 0])


def test_normalisation_uses_mean_and_std():
    clip = torch.full((2, 3, 8, 8), 255, dtype=torch.uint8)
    out = EvalClipTransform(8, 1, mean=(0.45,) * 3, std=(0.225,) * 3)(clip)
    torch.testing.assert_close(out, torch.full((1, 3, 2, 8, 8), (1 - 0.45) / 0.225))


def test_three_crops_cover_left_centre_right_of_the_long_side():
    clip = torch.arange(10 * 16).reshape(1, 1, 10, 16).expand(2, 3, -1, -1)
    left, centre, right = spatial_crops(clip, 10, 3)
    assert torch.equal(left, clip[..., 0:10])
    assert torch.equal(centre, clip[..., 3:13])
    assert torch.equal(right, clip[..., 6:16])
    (only,) = spatial_crops(clip, 10, 1)
    assert torch.equal(only, clip[..., 3:13])
    portrait = clip.transpose(-1, -2)
    top, _, bottom = spatial_crops(portrait, 10, 3)
    assert torch.equal(top, portrait[..., 0:10, :]) and torch.equal(bottom, portrait[..., 6:16, :])


# ---------------------------------------------------------------------------- synthetic data


def test_synthetic_rendering_is_deterministic_and_class_dependent():
    a, b = render_video(0, seed=5), render_video(0, seed=5)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, render_video(0, seed=6))

    def actor_track(frames):
        # Centre and area of the bright pixels: mostly the actor (the distractor is smaller).
        bright = frames.astype(np.int32).sum(-1) > 3 * 150
        rows = np.arange(frames.shape[1])[None, :, None]
        cols = np.arange(frames.shape[2])[None, None, :]
        mass = np.maximum(bright.sum((1, 2)), 1)
        return (bright * rows).sum((1, 2)) / mass, (bright * cols).sum((1, 2)) / mass, bright.sum((1, 2))

    index = {name: i for i, name in enumerate(SYNTHETIC_CLASSES)}
    for seed in range(3):
        rows, cols, _ = actor_track(render_video(index["Move.Line"], seed=seed))
        assert max(np.ptp(rows), np.ptp(cols)) > 25 and min(np.ptp(rows), np.ptp(cols)) < 15
        rows, cols, _ = actor_track(render_video(index["Move.Circle"], seed=seed))
        assert min(np.ptp(rows), np.ptp(cols)) > 25
        rows, cols, _ = actor_track(render_video(index["Stay"], seed=seed))
        assert max(np.ptp(rows), np.ptp(cols)) < 15
        _, _, area = actor_track(render_video(index["Change.Size"], seed=seed))
        assert area.max() > 4 * area.min()
        _, _, area = actor_track(render_video(index["Blink"], seed=seed))
        assert (area < 0.3 * area.max()).sum() >= 10  # hidden in many frames


def test_synthetic_dataset_layout_and_cache(synthetic_root):
    files = sorted(p.name for p in synthetic_root.glob("*.mp4"))
    assert len(files) == 18 * len(SYNTHETIC_CLASSES)
    parsed = [parse_smarthome_name(f) for f in files]
    assert all(p is not None for p in parsed)
    assert {p.activity for p in parsed} == set(SYNTHETIC_CLASSES)
    assert len({p.subject for p in parsed}) == 18
    manifest = json.loads((synthetic_root / "synthetic.json").read_text())
    assert manifest["videos_per_subject_class"] == 1
    # A second call with the same parameters reuses the folder (no rewrite).
    before = {p: p.stat().st_mtime_ns for p in synthetic_root.glob("*.mp4")}
    generate_synthetic_dataset(synthetic_root, videos_per_subject_class=1, seed=0)
    assert before == {p: p.stat().st_mtime_ns for p in synthetic_root.glob("*.mp4")}


def test_generator_refuses_to_overwrite_a_foreign_folder(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a synthetic dataset"):
        generate_synthetic_dataset(tmp_path, videos_per_subject_class=1)
    assert (tmp_path / "mine.txt").exists()


def test_synthetic_datamodule_splits_by_subject_and_labels_by_name(synthetic_root):
    dm = SyntheticSmarthome(
        root=str(synthetic_root), videos_per_subject_class=1, num_workers=0, batch_size=4, sampling_rate=4,
        train_short_side=(64, 80), crop_size=64, test_num_clips=2, test_num_crops=3,
    )
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    counts = {split: len(ds) for split, ds in dm.datasets.items()}
    k = len(SYNTHETIC_CLASSES)
    assert counts == {"train": 9 * k, "val": 2 * k, "test": 7 * k}
    for split, subjects in [("val", {19, 25}), ("test", {2, 10, 11, 14, 16, 18, 20})]:
        for record in dm.datasets[split].records:
            name = parse_smarthome_name(record.path.rsplit("/", 1)[1])
            assert name.subject in subjects
            assert SYNTHETIC_CLASSES[record.label] == name.activity
    train = next(iter(dm.train_dataloader()))
    assert train["video"].shape == (4, 3, 8, 64, 64)
    test = next(iter(dm.test_dataloader()))
    assert test["video"].shape == (4, 6, 3, 8, 64, 64)  # 2 clips x 3 crops per video
    assert test["failed"] == 0


def test_a_broken_file_is_replaced_in_training_and_dropped_in_evaluation(synthetic_root, tmp_path, caplog):
    good = sorted(synthetic_root.glob("Change.Size_*.mp4"))[0]
    broken = tmp_path / "Move.Circle_p03_r00_v01_c01.mp4"
    broken.write_bytes(good.read_bytes()[:300])  # truncated
    records = [VideoRecord(str(broken), 3), VideoRecord(str(good), 4)]
    sampler = FrameSampler(num_frames=4, sampling_rate=4)
    train = VideoClipDataset(records, sampler, TrainClipTransform((64, 64), 64, False, (0.5,) * 3, (0.5,) * 3), train=True)
    sample = train[0]
    assert sample["failed"] == 1 and sample["path"] == str(good) and sample["label"] == 4
    assert str(broken) in caplog.text
    evaluation = VideoClipDataset(records, sampler, EvalClipTransform(64, 1, (0.5,) * 3, (0.5,) * 3), train=False)
    batch = collate_videos([evaluation[0], evaluation[1]])
    assert batch["failed"] == 1 and batch["label"].tolist() == [4] and batch["video"].shape[0] == 1
    copies = []
    for i in range(6):
        copy = tmp_path / f"broken{i}.mp4"
        copy.write_bytes(broken.read_bytes())
        copies.append(VideoRecord(str(copy), 3))
    only_broken = VideoClipDataset(copies, sampler, train.transform, train=True, max_retries=3)
    with pytest.raises(VideoDecodeError, match="4 unreadable videos in a row"):
        only_broken[0]
    # Each replacement is a file not tried yet: every seed finds the good file at the second try.
    for seed in range(20):
        torch.manual_seed(seed)
        assert train[0]["failed"] == 1
    with pytest.raises(VideoDecodeError, match="1 unreadable videos in a row and no other video to try"):
        VideoClipDataset(records[:1], sampler, train.transform, train=True)[0]


# ---------------------------------------------------------------------------- metrics


def test_mean_class_accuracy_averages_only_present_classes():
    metric = MeanClassAccuracy(num_classes=4)
    target = torch.tensor([0, 0, 0, 1, 1, 2])
    preds = torch.tensor([0, 0, 3, 1, 0, 3])  # class 3 predicted but absent from targets
    metric.update(preds, target)
    # class 0: 2/3, class 1: 1/2, class 2: 0/1 -> mean 7/18; class 3 is not averaged.
    assert metric.compute().item() == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)
    per_class = metric.per_class()
    assert per_class[:3].tolist() == pytest.approx([2 / 3, 1 / 2, 0.0]) and torch.isnan(per_class[3])
    scores = torch.nn.functional.one_hot(preds, 4).float()
    other = MeanClassAccuracy(num_classes=4)
    other.update(scores, target)
    assert other.compute() == metric.compute()


def test_synthetic_root_refuses_files_the_generator_did_not_write(tmp_path):
    # The scan reads names only: empty files stand in for videos.
    for name in ("Blink_p03_r00_v00_c01.mp4", "Walk_p03_r00_v00_c01.mp4"):
        (tmp_path / name).touch()
    with pytest.raises(ValueError, match=r"1 file\(s\) with unknown activity: .*Walk_p03_r00_v00_c01\.mp4"):
        SyntheticSmarthome(str(tmp_path), num_workers=0).setup("fit")
    lenient = SyntheticSmarthome(str(tmp_path), num_workers=0, strict=False)
    assert [r.label for r in lenient.catalog().records["train"]] == [0]  # Blink, subject 3 trains
    assert lenient.catalog().excluded_counts() == {"unknown activity": 1}


def test_eval_transform_is_the_resize_and_the_crops_exactly_no_flip():
    """A horizontal ramp (each column its own value) through the evaluation transform: every
    view is exactly its window of the frame, left to right (a flip or a shifted crop fails)."""
    columns = torch.arange(64, dtype=torch.uint8) * 4  # 0..252, one value per column
    frames = columns.expand(2, 3, 32, 64).contiguous()  # (T, C, H, W); short side 32 = the crop
    for num_crops, offsets in ((3, (0, 16, 32)), (1, (16,))):
        views = EvalClipTransform(32, num_crops, (0.0,) * 3, (1.0,) * 3)(frames)
        assert views.shape == (num_crops, 3, 2, 32, 32)
        for view, offset in zip(views, offsets):
            expected = (columns[offset:offset + 32].float() / 255).expand(3, 2, 32, 32)
            torch.testing.assert_close(view, expected, rtol=0, atol=1e-6)
        # The same views every call: nothing random in evaluation.
        torch.testing.assert_close(EvalClipTransform(32, num_crops, (0.0,) * 3, (1.0,) * 3)(frames), views)
