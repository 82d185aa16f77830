"""DataLoader workers: decoding in forked and spawned worker processes, persistent workers
kept across epochs, labels intact."""

import logging
from pathlib import Path

import pytest

from dna_video.data import ToyotaSmarthome
from dna_video.data.smarthome import parse_smarthome_name


def labels_match(dm, batch):
    names = [parse_smarthome_name(Path(p).name).activity for p in batch["path"]]
    return [dm.class_names[i] for i in batch["label"].tolist()] == names


# A spawned worker imports torch again (5 s of CPU): slow.
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_workers_decode_with_fork_and_spawn_and_persist_across_epochs(smarthome_tree, context):
    root, _ = smarthome_tree
    dm = ToyotaSmarthome(
        str(root), protocol="cs", num_workers=2 if context == "fork" else 1, batch_size=4, num_frames=4,
        sampling_rate=2, train_short_side=(32, 40), crop_size=32, persistent_workers=True,
        multiprocessing_context=context, val_num_crops=1,  # one view per validation video
    )
    dm.setup("fit")
    loader = dm.train_dataloader()
    pids = []
    for _epoch in range(2):
        seen = 0
        for batch in loader:
            assert batch["video"].shape == (4, 3, 4, 32, 32) and labels_match(dm, batch)
            seen += 4
        assert seen == len(dm.datasets["train"]) // 4 * 4
        pids.append(sorted(w.pid for w in loader._iterator._workers))
    assert pids[0] == pids[1]  # the same worker processes served both epochs
    if context == "fork":  # (a spawned worker imports torch again: one is enough for the test)
        val = next(iter(dm.val_dataloader()))
        assert val["video"].shape[1:] == (1, 3, 4, 32, 32) and labels_match(dm, val)


def test_a_hanging_decoder_stops_the_run_with_the_timeout(smarthome_tree, monkeypatch, capfd, request):
    root, _ = smarthome_tree
    import time

    import dna_video.data.dataset as dataset_module

    def hang(*args, **kwargs):
        time.sleep(3)  # longer than the timeout (2 s); short, so the worker exits soon after

    # Forked workers inherit the patched decoder (every read hangs) and a console handler,
    # as the CLI sets up.
    monkeypatch.setattr(dataset_module, "read_frames", hang)
    console = logging.StreamHandler()
    logging.getLogger("dna_video").addHandler(console)
    request.addfinalizer(lambda: logging.getLogger("dna_video").removeHandler(console))
    dm = ToyotaSmarthome(str(root), protocol="cs", num_workers=1, batch_size=2, num_frames=2, sampling_rate=2,
                         train_short_side=(32, 40), crop_size=32, multiprocessing_context="fork", timeout=2.0)
    dm.setup("fit")
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="DataLoader timed out after 2"):
        next(iter(dm.train_dataloader()))
    assert time.perf_counter() - start < 30
    # Before that, the worker named the file it was stuck on (at half the timeout).
    stuck = [line for line in capfd.readouterr().err.splitlines() if "still decoding" in line]
    assert stuck and any(str(root) in line and ".mp4 after 1 s" in line for line in stuck)


def test_evaluation_across_processes_sees_every_video_once(smarthome_tree, monkeypatch):
    """Under DDP, val/test loaders shard the videos without the padding repeats of
    Lightning's default sampler (which would count videos twice in the metrics)."""
    from torch.utils.data import DistributedSampler

    import dna_video.data.datamodule as datamodule

    root, _ = smarthome_tree
    dm = ToyotaSmarthome(str(root), protocol="cs", num_workers=0, batch_size=2, num_frames=2, sampling_rate=2,
                         train_short_side=(32, 40), crop_size=32)
    dm.setup("test")
    n = len(dm.datasets["test"])
    assert dm.test_dataloader().sampler.__class__.__name__ == "SequentialSampler"  # one process
    world = 3
    assert n % world  # the case where padding would repeat videos
    monkeypatch.setattr(datamodule.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(datamodule.dist, "get_world_size", lambda: world)
    shards = []
    for rank in range(world):
        monkeypatch.setattr(datamodule.dist, "get_rank", lambda rank=rank: rank)
        sampler = dm.test_dataloader().sampler
        assert isinstance(sampler, DistributedSampler)  # so Lightning keeps it
        shards.append(list(sampler))
    assert sorted(i for shard in shards for i in shard) == list(range(n))
