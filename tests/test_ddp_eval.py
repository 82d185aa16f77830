"""Evaluation under DDP (CPU processes, gloo) gives the single process's numbers: every logged
scalar reduced over the ranks, every video counted once, one merged predictions file.

The processes are forked from the test's (``ddp_fork``): the same DDP code as ``ddp_spawn``
(and as ``ddp``, which re-runs the command and so cannot run inside pytest), without each
process importing torch and Lightning again (measured: 50 s of CPU for both tests with
``ddp_spawn``, 15 s forked).

The three-process tests evaluate 97 videos (2 and 3 divide neither: the ranks get 33, 32 and
32, and Lightning's default sampler would repeat two) with several views per video (1 x 3 and
2 x 3), in ``test``, ``validate``, ``predict`` and the validation inside ``fit`` (its value
picks ``best-*.ckpt``); ``fit`` trains with a learning rate of 0, so that one and three
processes validate the same weights.
"""

import csv
import json

import numpy as np
import pytest

from dna_video.data.synthetic import SYNTHETIC_CLASSES
from dna_video.data.video import write_video
from dna_video.training.cli import main
from run_helpers import tiny_run_args

TEST_VIDEOS = 7 * len(SYNTHETIC_CLASSES)  # an odd count: the ranks get 18 and 17 videos
VIDEOS = 97  # three ranks: 33, 32, 32
METRICS = ("loss", "top1", "top5", "mca")


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


@pytest.fixture(scope="session")
def listed_videos(tmp_path_factory):
    """97 small videos of noise and gradients (each its own), labelled i % 5, in one list file
    used for every split: (root, config file of the list DataModule)."""
    root = tmp_path_factory.mktemp("ddp97")
    rng = np.random.default_rng(0)
    lines = []
    for i in range(VIDEOS):
        base = rng.uniform(0, 255, (1, 6, 8, 3))
        frames = np.kron(base, np.ones((24, 8, 8, 1))) + rng.normal(0, 20, (24, 48, 64, 3))
        write_video(str(root / f"video_{i:03d}.mp4"), np.clip(frames, 0, 255).astype(np.uint8), fps=30, gop=8)
        lines.append(f"video_{i:03d}.mp4 {i % len(SYNTHETIC_CLASSES)}")
    (root / "videos.txt").write_text("\n".join(lines) + "\n")
    (root / "classes.txt").write_text("\n".join(SYNTHETIC_CLASSES) + "\n")
    config = root / "data.yaml"
    config.write_text(json.dumps({"data": {"class_path": "dna_video.data.VideoListDataModule", "init_args": {
        "root": str(root), "classes": str(root / "classes.txt"), "train_list": "videos.txt", "val_list": "videos.txt",
        "test_list": "videos.txt", "num_workers": 0, "batch_size": 4, "num_frames": 4, "sampling_rate": 5,
        "train_short_side": [64, 72], "crop_size": 64}}}))
    return root, config


def list_args(config, log_dir, val_views, test_views, *extra):
    (val_clips, val_crops), (test_clips, test_crops) = val_views, test_views
    return [
        "--config", "configs/quickstart.yaml", "--config", str(config),
        f"--data.init_args.val_num_clips={val_clips}", f"--data.init_args.val_num_crops={val_crops}",
        f"--data.init_args.test_num_clips={test_clips}", f"--data.init_args.test_num_crops={test_crops}",
        "--model.network.embed_dim=16", "--model.network.num_heads=2", "--model.network.depth=1",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.init_args.save_dir={log_dir}",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", *extra,
    ]


def logged(folder, stage):
    """The epoch's evaluation metrics of ``stage`` in a run's metrics.csv (the last row that has them)."""
    rows = [r for r in only(folder, "metrics.csv") if r.get(f"{stage}/loss")]
    return {key: float(rows[-1][f"{stage}/{key}"]) for key in METRICS}


def assert_same_metrics(one, three):
    for key in ("top1", "top5", "mca"):  # counts of videos: equal, not close
        assert three[key] == pytest.approx(one[key], abs=1e-7), key
    # The loss: a mean over every view, its sum taken in another order.
    assert three["loss"] == pytest.approx(one["loss"], rel=1e-6), "loss"
    for key in ("top1", "top5"):  # whole videos out of 97: a repeated or missing one would show
        assert abs(three[key] * VIDEOS - round(three[key] * VIDEOS)) < 1e-4, key


def assert_same_rows(one, three):
    assert [r["path"] for r in three] == [r["path"] for r in one] and len(one) == VIDEOS  # dataset order
    for a, b in zip(one, three):
        assert (a["label"], a["pred"], a["pred_name"]) == (b["label"], b["pred"], b["pred_name"]), a["path"]
        assert float(a["prob"]) == pytest.approx(float(b["prob"]), abs=1e-5), a["path"]
        assert [c.split(":")[0] for c in a["top_k"].split()] == [c.split(":")[0] for c in b["top_k"].split()]


@pytest.mark.slow
@pytest.mark.parametrize("val_views, test_views", [((1, 3), (2, 3)), ((2, 3), (1, 3))], ids=["val1x3-test2x3",
                                                                                          "val2x3-test1x3"])
def test_three_processes_evaluate_97_videos_of_several_views_as_one_process(listed_videos, tmp_path, val_views,
                                                                            test_views):
    _, config = listed_videos
    ddp = ["--trainer.devices=3", "--trainer.strategy=ddp_fork"]
    # fit with lr 0 (one training batch): the validation inside fit, its checkpoint choice, and
    # the test after fit of that checkpoint (test_metrics.json, test_predictions.csv).
    fit = ["--model.optimizer.init_args.lr=0.0", "--model.schedule.warmup_steps=0", "--trainer.max_epochs=1",
           "--trainer.limit_train_batches=1", "--trainer.num_sanity_val_steps=0"]
    runs = {}
    for name, extra in (("one", []), ("three", ddp)):
        cli = main(["fit", *list_args(config, tmp_path / name / "fit", val_views, test_views, *fit, *extra)])
        assert cli.trainer.world_size == (3 if extra else 1)
        main(["validate", *list_args(config, tmp_path / name / "validate", val_views, test_views, *extra)])
        runs[name] = tmp_path / name

    assert_same_metrics(logged(runs["one"] / "fit", "val"), logged(runs["three"] / "fit", "val"))
    assert_same_metrics(logged(runs["one"] / "validate", "val"), logged(runs["three"] / "validate", "val"))
    assert_same_metrics(logged(runs["one"] / "fit", "test"), logged(runs["three"] / "fit", "test"))

    # The value that chose best-*.ckpt, as the checkpoint callback kept it.
    import torch

    def best(run):
        (last,) = (run / "fit").rglob("last.ckpt")
        state = torch.load(last, weights_only=True)["callbacks"]
        (kept,) = [v for k, v in state.items() if "val/top1" in k]
        return float(kept["best_model_score"]), kept["best_model_path"].rsplit("/", 1)[1]

    assert best(runs["three"]) == best(runs["one"])

    # The test report: one file each, every video once, in the dataset's order; the same counts.
    assert_same_rows(only(runs["one"] / "fit", "test_predictions.csv"), only(runs["three"] / "fit", "test_predictions.csv"))
    reports = [json.loads(next((runs[n] / "fit").rglob("test_metrics.json")).read_text()) for n in ("one", "three")]
    assert reports[1]["num_videos"] == reports[0]["num_videos"] == VIDEOS
    assert reports[1]["confusion_matrix"] == reports[0]["confusion_matrix"]
    assert np.asarray(reports[0]["confusion_matrix"]).sum(axis=1).tolist() == [20, 20, 19, 19, 19]  # labels i % 5
    for key in ("top1", "mca", "per_class_count"):
        assert reports[1][key] == pytest.approx(reports[0][key], abs=1e-7), key


@pytest.mark.slow
def test_three_processes_predict_97_videos_of_2x3_views_into_one_file(listed_videos, tmp_path):
    _, config = listed_videos
    for name, extra in (("one", []), ("three", ["--trainer.devices=3", "--trainer.strategy=ddp_fork"])):
        main(["predict", *list_args(config, tmp_path / name, (1, 3), (2, 3), *extra)])
    assert_same_rows(only(tmp_path / "one", "predictions.csv"), only(tmp_path / "three", "predictions.csv"))
