"""Evaluation under DDP (2 CPU processes, gloo) gives the single process's numbers: every
logged scalar reduced over the ranks, every video counted once, one merged predictions file.

The two processes are forked from the test's (``ddp_fork``): the same DDP code as ``ddp_spawn``
(and as ``ddp``, which re-runs the command and so cannot run inside pytest), without each
process importing torch and Lightning again (measured: 50 s of CPU for both tests with
``ddp_spawn``, 15 s forked)."""

import csv

import pytest

from dna_video.training.cli import main
from dna_video.data.synthetic import SYNTHETIC_CLASSES
from run_helpers import tiny_run_args

TEST_VIDEOS = 7 * len(SYNTHETIC_CLASSES)  # an odd count: the ranks get 18 and 17 videos


def args(root, log_dir, *extra):
    return tiny_run_args(root, log_dir, *extra)


def only(folder, name):
    (path,) = folder.rglob(name)
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_two_processes_write_one_predictions_file_in_dataset_order(synthetic_root, tmp_path):
    ddp = ["--trainer.devices=2", "--trainer.strategy=ddp_fork"]
    main(["predict", *args(synthetic_root, tmp_path / "one")])
    assert main(["predict", *args(synthetic_root, tmp_path / "two", *ddp)]).trainer.world_size == 2
    rows_one = only(tmp_path / "one", "predictions.csv")
    rows_two = only(tmp_path / "two", "predictions.csv")  # one file, not one per rank
    assert len(rows_two) == TEST_VIDEOS and [r["path"] for r in rows_two] == [r["path"] for r in rows_one]
    for a, b in zip(rows_one, rows_two):
        assert a["pred"] == b["pred"] and a["label"] == b["label"]
        assert float(a["prob"]) == pytest.approx(float(b["prob"]), abs=1e-5)



@pytest.mark.slow
def test_two_processes_log_the_single_process_metrics(synthetic_root, tmp_path):
    ddp = ["--trainer.devices=2", "--trainer.strategy=ddp_fork"]
    # No checkpoint: seed_everything(0) builds the same weights in both runs.
    main(["test", *args(synthetic_root, tmp_path / "one")])
    assert main(["test", *args(synthetic_root, tmp_path / "two", *ddp)]).trainer.world_size == 2
    (one,) = [r for r in only(tmp_path / "one", "metrics.csv") if r.get("test/loss")]
    (two,) = [r for r in only(tmp_path / "two", "metrics.csv") if r.get("test/loss")]
    for key in ("test/loss", "test/top1", "test/top5", "test/mca"):
        assert float(two[key]) == pytest.approx(float(one[key]), abs=1e-5), key
    # top-1 is a count of videos over all 35: a duplicated or missing video would show.
    assert abs(float(two["test/top1"]) * TEST_VIDEOS - round(float(two["test/top1"]) * TEST_VIDEOS)) < 1e-4
