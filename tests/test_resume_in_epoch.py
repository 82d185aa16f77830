"""Resume inside an epoch (docs/reliability.md, "Resume inside an epoch"): the training order
is saved with its place in the epoch and taken up again, video by video.

The sampler and loader alone first (every order they replace, counted by index), then the
command line: a run killed by SIGKILL in the middle of an epoch (``--last_every_n_steps``) and
resumed with ``--ckpt_path last`` trains that epoch on each training video exactly once, in the
uninterrupted run's order, and ends on the uninterrupted run's weights, bit for bit.
"""

import json
import logging
import shutil
import signal

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DistributedSampler, RandomSampler

from dna_video.data.resume import EpochSampler, ResumableDataLoader, ResumeMismatchError
from dna_video.data.records import RecordTable
from dna_video.data.seeding import SeededItem, SeededSampler
from run_helpers import short_run_args
from test_reliability import console, restore_determinism  # noqa: F401  (a fixture)


class Items(torch.utils.data.Dataset):
    """Item i is i (a SeededItem's index)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, item):
        return item.index if isinstance(item, SeededItem) else item


class Split(Items):
    """Items with a split's RecordTable, as a VideoClipDataset has."""

    def __init__(self, paths, labels=None):
        super().__init__(len(paths))
        self.records = RecordTable(paths, labels or [0] * len(paths))


def indices(batches):
    return [int(i) for batch in batches for i in batch]


def loader(n=23, batch=3, data_seed=None, replicas=1, rank=0, workers=0, seed=5):
    sampler = EpochSampler(Items(n), data_seed, num_replicas=replicas, rank=rank, seed=seed)
    return ResumableDataLoader(Items(n), batch_size=batch, sampler=sampler, drop_last=True, num_workers=workers)


def test_the_epoch_orders_are_those_of_the_samplers_they_replace():
    n = 23
    assert list(EpochSampler(Items(n), 4)) == list(SeededSampler(Items(n), 4))  # indices and item seeds
    sampler = EpochSampler(Items(n), 4)
    sampler.set_epoch(2)
    seeded = SeededSampler(Items(n), 4)
    seeded.set_epoch(2)
    assert list(sampler) == list(seeded)
    torch.manual_seed(11)
    plain = list(RandomSampler(Items(n)))  # draws its seed from the global generator
    torch.manual_seed(11)
    assert list(EpochSampler(Items(n))) == plain
    for rank in range(3):
        theirs = DistributedSampler(Items(n), num_replicas=3, rank=rank, shuffle=True, seed=5)
        ours = EpochSampler(Items(n), None, num_replicas=3, rank=rank, seed=5)
        theirs.set_epoch(1)
        ours.set_epoch(1)
        assert list(ours) == list(theirs)


@pytest.mark.parametrize("data_seed", [None, 7])
def test_a_loader_resumed_from_its_state_hands_over_the_rest_of_the_epoch(data_seed):
    torch.manual_seed(0)
    whole = loader(data_seed=data_seed)
    whole.sampler.set_epoch(1)
    reference = indices(whole)
    assert len(reference) == 21 and len(set(reference)) == 21  # 7 batches of 3 of the 23 items, each once

    torch.manual_seed(0)
    first = loader(data_seed=data_seed)
    first.sampler.set_epoch(1)
    seen = []
    for batch in first:
        seen.append(batch)
        if len(seen) == 3:
            break
    state = first.state_dict()
    assert state["epoch"] == 1 and state["batches"] == 3

    torch.manual_seed(123)  # another global state: the order must come from the saved state
    resumed = loader(data_seed=data_seed)
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(1)
    rest = list(resumed)
    assert indices(seen) + indices(rest) == reference
    assert resumed.state_dict()["batches"] == 7  # counted from the epoch's start: a second resume works too

    again = loader(data_seed=data_seed)  # saved after the resume, mid-way through the rest
    again.load_state_dict({**state, "batches": 5})
    again.sampler.set_epoch(1)
    assert indices(again) == reference[15:]


def test_the_order_is_drawn_after_the_epoch_is_set_with_workers():
    """Lightning creates the training iterator before it sets the epoch of a resumed run; a loader
    with workers would draw that first epoch's order from the sampler's old epoch."""
    ours = loader(data_seed=3, workers=2)
    iterator = iter(ours)
    ours.sampler.set_epoch(4)
    expected = loader(data_seed=3)
    expected.sampler.set_epoch(4)
    assert indices([next(iterator)]) == indices(expected)[:3]


def test_every_process_resumes_its_own_share():
    full = []
    for rank in range(3):
        plain = loader(n=30, batch=2, replicas=3, rank=rank)
        plain.sampler.set_epoch(2)
        full.append(indices(plain))
        cut = loader(n=30, batch=2, replicas=3, rank=rank)
        cut.load_state_dict({**plain.state_dict(), "epoch": 2, "batches": 2})
        cut.sampler.set_epoch(2)
        assert indices(cut) == full[rank][4:]
    assert sorted(set(i for share in full for i in share)) == list(range(30))  # each video in one share
    # the resumed run's seed differs (seed_everything: true draws a new one): the saved order goes on
    for rank in range(3):
        killed = loader(n=30, batch=2, replicas=3, rank=rank)
        killed.sampler.set_epoch(2)
        head = list(zip(range(2), killed))
        reseeded = loader(n=30, batch=2, replicas=3, rank=rank, seed=6)
        reseeded.load_state_dict(killed.state_dict())
        reseeded.sampler.set_epoch(2)
        assert indices(batch for _, batch in head) + indices(reseeded) == full[rank]


def test_a_checkpoint_before_the_resumed_runs_first_batch_keeps_the_place():
    """Lightning may save (SIGTERM under DDP) after the state is loaded and before the first batch."""
    first = loader(data_seed=7)
    first.sampler.set_epoch(1)
    list(zip(range(4), first))
    state = first.state_dict()
    resumed = loader(data_seed=7)
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(1)
    iter(resumed)
    assert resumed.state_dict() == state and state["batches"] == 4


def test_a_changed_setting_stops_a_resume_inside_an_epoch_and_not_one_at_its_end():
    first = loader(data_seed=1)
    first.sampler.set_epoch(0)
    state = {**first.state_dict(), "batches": 2}
    for changed, what in ((loader(batch=4, data_seed=1), "data.init_args.batch_size 3 then, 4 now"),
                          (loader(replicas=2, data_seed=1), "processes 1 then, 2 now"),
                          (loader(n=24, data_seed=1), "training videos 23 then, 24 now"),
                          (loader(data_seed=2), "data.init_args.data_seed 1 then, 2 now")):
        changed.load_state_dict(state)
        changed.sampler.set_epoch(0)
        with pytest.raises(ResumeMismatchError, match="middle of epoch 0, after 2 batches") as error:
            next(iter(changed))
        assert what in str(error.value)
    # (review of issue 38) the same number of videos, another file in the split: refused too
    def split_loader(split):
        return ResumableDataLoader(split, batch_size=1, sampler=EpochSampler(split, 1))

    saved = {**split_loader(Split(["a/v0.mp4", "a/v1.mp4", "a/v2.mp4"])).state_dict(), "batches": 1}
    for changed, what in ((Split(["a/v0.mp4", "a/v1.mp4", "a/v9.mp4"]), "the training split's file names"),
                          (Split(["a/v0.mp4", "a/v1.mp4", "a/v2.mp4"], labels=[1, 1, 0]), "the training split's")):
        resumed = split_loader(changed)
        resumed.load_state_dict(saved)
        with pytest.raises(ResumeMismatchError, match=what):
            next(iter(resumed))
    moved = split_loader(Split(["/mnt/b/v0.mp4", "/mnt/b/v1.mp4", "/mnt/b/v2.mp4"]))  # the same files, another root
    moved.load_state_dict(saved)
    assert len(list(moved)) == 2  # goes on with the 2 videos left
    finished = loader(batch=4, data_seed=1)  # the saved epoch's end: the next epoch starts as usual
    finished.load_state_dict({**state, "batches": 7})
    finished.sampler.set_epoch(1)
    assert len(indices(finished)) == 20
    ended = loader(data_seed=2)  # saved at the end of epoch 0 (7 of 7 batches), resumed in it: nothing left
    ended.load_state_dict({**state, "batches": 7})
    ended.sampler.set_epoch(0)
    assert indices(ended) == []


class RecordBatches(Callback):
    """Append each training batch's epoch, step and video paths to a JSON-lines file (flushed per
    batch: a process killed later keeps what it wrote)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"epoch": trainer.current_epoch, "step": trainer.global_step,
                                "paths": list(batch["path"])}) + "\n")


def batches_of(path, epoch):
    with open(path) as f:
        return [row for row in map(json.loads, f) if row["epoch"] == epoch]


@pytest.mark.slow
@pytest.mark.forks
@pytest.mark.usefixtures("restore_determinism")
def test_sigkill_inside_an_epoch_then_ckpt_path_last_sees_each_video_once_and_ends_on_the_same_weights(
        synthetic_root, tmp_path, capsys, caplog, forked_cli):
    def args(logs, record, *extra):
        return short_run_args(
            synthetic_root, logs, "--trainer.max_epochs=2", "--trainer.deterministic=true",
            "--data.init_args.data_seed=3", "--last_every_n_steps=3",
            "--trainer.callbacks+=test_resume_in_epoch.RecordBatches", f"--trainer.callbacks.init_args.path={record}",
            *extra)

    logs = tmp_path / "killed"
    # Killed at step 16, the 5th batch of epoch 1 (11 batches an epoch): last.ckpt is step 15's.
    # It loads with 2 workers; the resumed and the uninterrupted runs load in-process.
    killed = forked_cli(["fit", *args(logs, tmp_path / "killed.jsonl", "--data.init_args.num_workers=2",
                                      "--trainer.callbacks+=run_helpers.SignalAt",
                                      "--trainer.callbacks.init_args.step=16")], tmp_path / "killed_output.txt")
    code, stderr = console(capsys, "fit", *args(tmp_path / "straight", tmp_path / "straight.jsonl"))
    assert code in (0, None), stderr[-3000:]
    killed.join(timeout=600)
    assert killed.exitcode == -signal.SIGKILL, (tmp_path / "killed_output.txt").read_text()[-3000:]
    run = logs / "exp" / "version_0"
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["epoch"] == 1 and saved["global_step"] == 15
    shutil.copy(run / "checkpoints" / "last.ckpt", tmp_path / "step15.ckpt")

    with caplog.at_level(logging.INFO, logger="dna_video"):
        code, stderr = console(capsys, "fit", *args(logs, tmp_path / "resumed.jsonl", "--ckpt_path", "last"))
    assert code in (0, None), stderr[-3000:]
    assert "resuming epoch 1 after 4 of its 11 batches" in caplog.text
    assert "resuming epoch 1 with 0 DataLoader workers instead of 2" in caplog.text

    # The interrupted epoch: the killed run's batches up to its checkpoint, then the resumed run's.
    straight = [p for row in batches_of(tmp_path / "straight.jsonl", 1) for p in row["paths"]]
    before = [p for row in batches_of(tmp_path / "killed.jsonl", 1) if row["step"] <= 15 for p in row["paths"]]
    after = [p for row in batches_of(tmp_path / "resumed.jsonl", 1) for p in row["paths"]]
    assert len(before) == 16 and [row["step"] for row in batches_of(tmp_path / "resumed.jsonl", 1)][0] == 16
    assert before + after == straight  # the same videos in the same order
    train = sorted(p.name for p in synthetic_root.glob("*.mp4") if int(p.name.split("_p")[1][:2]) in
                   (3, 4, 6, 7, 9, 12, 13, 15, 17))  # the cross-subject training subjects
    epoch = [p.rsplit("/", 1)[1] for p in before + after]
    assert len(epoch) == len(set(epoch)) == len(train) // 4 * 4 and set(epoch) <= set(train)  # each once

    final = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    reference = torch.load(tmp_path / "straight" / "exp" / "version_0" / "checkpoints" / "last.ckpt",
                           weights_only=True)
    assert final["global_step"] == reference["global_step"] == 22
    for key, value in reference["state_dict"].items():
        torch.testing.assert_close(final["state_dict"][key], value, rtol=0, atol=0, msg=key)

    # The same checkpoint with another batch size: a clear stop, before any step.
    code, stderr = console(capsys, "fit", *args(tmp_path / "other", tmp_path / "other.jsonl", "--ckpt_path",
                                                 str(tmp_path / "step15.ckpt"), "--data.init_args.batch_size=3"))
    assert code == 1 and "Traceback" not in stderr
    assert "ResumeMismatchError: the checkpoint was written in the middle of epoch 1, after 4 batches" in stderr
    assert "data.init_args.batch_size 4 then, 3 now" in stderr
    assert not (tmp_path / "other.jsonl").exists()
