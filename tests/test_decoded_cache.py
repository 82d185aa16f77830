"""``cache_decoded``: each video decoded once per process, whole, and every clip taken from
memory: the same batches as decoding each clip (same seeds), in training and in evaluation,
masks included, with one decode per video across epochs."""

import numpy as np
import pytest
import torch

from dna_video.data import dataset as dataset_module
from dna_video.data.datamodule import VideoDataModule
from dna_video.data.dataset import VideoRecord
from dna_video.data.video import write_video

VIDEOS = 8


@pytest.fixture(scope="session")
def videos(tmp_path_factory):
    """Videos of random pixels and lengths (any other frame gives other values)."""
    folder = tmp_path_factory.mktemp("cache")
    rng = np.random.default_rng(1)
    paths = []
    for i in range(VIDEOS):
        path = folder / f"v{i}.mp4"
        write_video(str(path), rng.integers(0, 256, (int(rng.integers(14, 30)), 32, 40, 3), dtype=np.uint8), fps=30.0)
        paths.append(str(path))
    return paths


def fake_masks(path: str) -> np.ndarray:
    """Masks (N, 2, H, W) that tell frames and videos apart: pixel (y, x) of frame i is set
    when (i + y + x + len(path)) is a multiple of 3 (channel 0) or 5 (channel 1)."""
    i, y, x = np.ogrid[:40, :32, :40]
    total = i + y + x + len(path)
    return np.stack([total % 3 == 0, total % 5 == 0], axis=1)


class Data(VideoDataModule):
    def __init__(self, paths, **kwargs):
        super().__init__(root="unused", batch_size=3, num_workers=0, num_frames=4, sampling_rate=2, target_fps=None,
                         train_short_side=(24, 30), crop_size=20, test_num_clips=2, test_num_crops=3,
                         data_seed=9, **kwargs)
        self.paths = paths

    @property
    def class_names(self):
        return ["a", "b"]

    def build_split(self, split):
        return [VideoRecord(p, i % 2) for i, p in enumerate(self.paths)]

    def make_dataset(self, split, records):
        dataset = super().make_dataset(split, records)
        dataset.mask_reader = counted_masks
        return dataset


CALLS = {"masks": 0}


def counted_masks(path):
    CALLS["masks"] += 1
    return fake_masks(path)


def _batches(data, epochs):
    out = []
    loader = data.train_dataloader()
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)
        out += [(b["index"], b["video"], b["masks"]) for b in loader]
    out += [(b["index"], b["video"], b["masks"]) for b in data.test_dataloader()]
    return out


def test_cached_batches_equal_decoded_ones_and_each_video_is_decoded_once(videos, monkeypatch, caplog):
    decodes = []
    real = dataset_module.read_frames

    def counted(path, sampler, decoder="decord"):
        decodes.append(path)
        return real(path, sampler, decoder)

    monkeypatch.setattr(dataset_module, "read_frames", counted)
    plain = Data(videos)
    plain.setup()
    expected = _batches(plain, [0, 1])
    # Without the cache: one decode per clip (2 epochs of 6 training clips, 8 test videos).
    assert len(decodes) == 2 * 6 + VIDEOS
    decodes.clear()
    CALLS["masks"] = 0
    with caplog.at_level("INFO", logger="dna_video.data.datamodule"):
        cached = Data(videos, cache_decoded=True)
        cached.setup()
    got = _batches(cached, [0, 1])
    # Once per video and split (train and test set up apart), masks too, whatever the epochs.
    assert sorted(decodes) == sorted(videos * 3) and CALLS["masks"] == 3 * VIDEOS
    assert len(got) == len(expected) == 2 * 2 + 3
    for (index, video, masks), (index_e, video_e, masks_e) in zip(got, expected):
        assert torch.equal(index, index_e) and torch.equal(video, video_e) and torch.equal(masks, masks_e)
    # The log says what the cache holds: every decodable frame and mask of the split's videos.
    frames = sum(real(p, lambda n, fps: np.arange(n)).frames.nbytes for p in videos)
    mask_bytes = sum(fake_masks(p).nbytes for p in videos)
    assert f"Data test: {VIDEOS} decoded videos cached in memory ({(frames + mask_bytes) / 2**20:.1f} MiB)" \
        in caplog.text


def test_a_clip_from_the_cache_is_the_decoded_clip(videos):
    """The cache's frames against the decoder's own answer for a set of indices (repeated and
    out of order, as clamped and looped clips ask)."""
    cached = Data(videos, cache_decoded=True)
    cached.setup("test")
    dataset = cached.datasets["test"]
    indices = np.array([5, 0, 13, 13, 2])
    for path in videos[:3]:
        taken = dataset._read(path, lambda n, fps: indices)
        decoded = dataset_module.read_frames(path, lambda n, fps: indices)
        np.testing.assert_array_equal(taken.frames, decoded.frames)
        assert (taken.num_frames, taken.fps) == (decoded.num_frames, decoded.fps)
