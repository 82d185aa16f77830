"""The training data's own random stream (``data_seed``): the batches of an epoch are a function
of (data_seed, epoch) only, whatever consumed torch's global generator before, however many
workers load them, and after a resume-style restart at a later epoch."""

import numpy as np
import pytest
import torch

from dna_video.data.datamodule import VideoDataModule
from dna_video.data.dataset import VideoRecord
from dna_video.data.seeding import SeededItem, SeededSampler, epoch_order, item_seed
from dna_video.data.video import write_video

VIDEOS = 12


@pytest.fixture(scope="session")
def noise_videos(tmp_path_factory):
    """Videos of random pixels: any other frame, scale, crop or flip gives other values."""
    folder = tmp_path_factory.mktemp("noise")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(VIDEOS):
        path = folder / f"v{i:02d}.mp4"
        write_video(str(path), rng.integers(0, 256, (24, 32, 40, 3), dtype=np.uint8), fps=30.0)
        paths.append(str(path))
    return paths


class NoiseData(VideoDataModule):
    def __init__(self, paths, **kwargs):
        super().__init__(root="unused", batch_size=4, num_frames=3, sampling_rate=3, target_fps=None,
                         train_short_side=(24, 34), crop_size=20, **kwargs)
        self.paths = paths

    @property
    def class_names(self):
        return ["a", "b", "c"]

    def build_split(self, split):
        return [VideoRecord(p, i % 3) for i, p in enumerate(self.paths)]


def _epochs(data: VideoDataModule, epochs, batches: int | None = None) -> list[list[dict]]:
    """The training batches of ``epochs`` (the first ``batches`` of each), as Lightning's fit
    loop draws them: set_epoch on the sampler, then a new iterator."""
    loader = data.train_dataloader()
    out = []
    for epoch in epochs:
        if hasattr(loader.sampler, "set_epoch"):  # without a data_seed: PyTorch's RandomSampler
            loader.sampler.set_epoch(epoch)
        got = []
        for batch in loader:
            got.append({"video": batch["video"], "index": batch["index"]})
            if batches and len(got) == batches:
                break
        out.append(got)
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    for epoch_a, epoch_b in zip(a, b):
        assert len(epoch_a) == len(epoch_b)
        for x, y in zip(epoch_a, epoch_b):
            torch.testing.assert_close(x["index"], y["index"], rtol=0, atol=0)
            torch.testing.assert_close(x["video"], y["video"], rtol=0, atol=0)


def _setup(paths, **kwargs):
    data = NoiseData(paths, num_workers=kwargs.pop("num_workers", 0), **kwargs)
    data.setup("fit")
    return data


def test_batches_do_not_depend_on_the_global_generator(noise_videos):
    torch.manual_seed(0)
    first = _epochs(_setup(noise_videos, data_seed=5), [0, 1])
    # Whatever consumed the global stream before (another model, other draws), the same batches.
    torch.manual_seed(1)
    torch.nn.TransformerEncoderLayer(16, 2)
    torch.rand(1000)
    state = torch.random.get_rng_state()
    second = _epochs(_setup(noise_videos, data_seed=5), [0, 1])
    _assert_same(first, second)
    # ... and loading left the global generator where it was (a model built after draws the same).
    assert torch.equal(torch.random.get_rng_state(), state)
    # Independent: the order is epoch_order's, and a batch's clips are what the dataset gives for
    # the sampler's item seeds, loaded one by one.
    dataset = _setup(noise_videos, data_seed=5).datasets["train"]
    for epoch, batches in enumerate(first):
        order = epoch_order(5, epoch, VIDEOS)
        np.testing.assert_array_equal(torch.cat([b["index"] for b in batches]).numpy(), order)
        for position in (0, 5):
            index = int(order[position])
            alone = dataset[SeededItem(index, item_seed(5, epoch, index))]["video"]
            torch.testing.assert_close(batches[position // 4]["video"][position % 4], alone, rtol=0, atol=0)
    # The bug this guards against: without a data_seed the global stream decides.
    torch.manual_seed(0)
    a = _epochs(_setup(noise_videos), [0], batches=1)
    torch.manual_seed(1)
    b = _epochs(_setup(noise_videos), [0], batches=1)
    assert not torch.equal(a[0][0]["video"], b[0][0]["video"])


def test_batches_do_not_depend_on_the_number_of_workers(noise_videos):
    torch.manual_seed(0)
    inline = _epochs(_setup(noise_videos, data_seed=3), [0, 1], batches=2)
    torch.manual_seed(7)
    workers = _epochs(_setup(noise_videos, data_seed=3, num_workers=2), [0, 1], batches=2)
    _assert_same(inline, workers)


def test_epochs_differ_and_a_restart_at_epoch_e_gives_epoch_e(noise_videos):
    run = _epochs(_setup(noise_videos, data_seed=11), [0, 1, 2], batches=2)
    orders = [torch.cat([b["index"] for b in epoch]).tolist() for epoch in run]
    assert orders[0] != orders[1] != orders[2]
    # Another seed, another order.
    other = _epochs(_setup(noise_videos, data_seed=12), [0], batches=2)
    assert torch.cat([b["index"] for b in other[0]]).tolist() != orders[0]
    # A fresh module (after other draws), set to epoch 2 as a resumed fit is: epoch 2's batches.
    torch.rand(10)
    resumed = _epochs(_setup(noise_videos, data_seed=11), [2], batches=2)
    _assert_same(run[2:], resumed)
    # The same video in two epochs gets other draws (position, scale, crop, flip).
    assert item_seed(11, 0, 3) != item_seed(11, 1, 3)


def test_processes_split_one_order_between_them():
    class Items:
        def __len__(self):
            return 10

    whole = [item.index for item in SeededSampler(Items(), 4)]
    parts = [list(SeededSampler(Items(), 4, num_replicas=3, rank=r)) for r in range(3)]
    assert sorted(whole) == list(range(10)) and whole == epoch_order(4, 0, 10).tolist()
    # Every process draws the same order and takes every third item (padded with the first two).
    padded = whole + whole[:2]
    for rank, part in enumerate(parts):
        assert [item.index for item in part] == padded[rank::3]
        assert [item.seed for item in part] == [item_seed(4, 0, i) for i in padded[rank::3]]


def test_a_negative_seed_is_refused_in_one_line(noise_videos):
    with pytest.raises(ValueError, match="data.init_args.data_seed is -1: give 0 or more"):
        NoiseData(noise_videos, data_seed=-1)
