"""DataLoader workers: decoding in forked and spawned worker processes, persistent workers
kept across epochs, labels intact."""

from pathlib import Path

import pytest

from dna_video.data import ToyotaSmarthome
from dna_video.data.smarthome import parse_smarthome_name


def labels_match(dm, batch):
    names = [parse_smarthome_name(Path(p).name).activity for p in batch["path"]]
    return [dm.class_names[i] for i in batch["label"].tolist()] == names


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_decode_with_fork_and_spawn_and_persist_across_epochs(smarthome_tree, context):
    root, _ = smarthome_tree
    dm = ToyotaSmarthome(
        str(root), protocol="cs", num_workers=2 if context == "fork" else 1, batch_size=4, num_frames=4,
        sampling_rate=2, train_short_side=(32, 40), crop_size=32, persistent_workers=True,
        multiprocessing_context=context,
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
