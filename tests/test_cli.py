"""LightningCLI end to end on real generated videos: fit + test, validate, predict, links."""

import csv
import json

import pytest
import torch
import yaml

from dna_video.training.cli import DnACLI, main
from dna_video.data.synthetic import SYNTHETIC_CLASSES

K = len(SYNTHETIC_CLASSES)
TEST_VIDEOS = 7 * K  # 7 test subjects, one video per class each


def cli_args(root, log_dir, *extra):
    return [
        "--config", "configs/quickstart.yaml",
        f"--data.init_args.root={root}",
        "--data.init_args.videos_per_subject_class=1",
        "--data.init_args.num_workers=0",
        "--data.init_args.batch_size=4",
        "--data.init_args.num_frames=4",
        "--data.init_args.test_num_crops=3",
        "--model.network.embed_dim=32", "--model.network.num_heads=2", "--model.network.depth=2",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={log_dir}",
        "--trainer.logger.init_args.name=smoke",
        "--trainer.enable_progress_bar=false",
        *extra,
    ]


def read_metrics(log_dir, version):
    with open(log_dir / "smoke" / version / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_fit_then_test_writes_checkpoints_config_and_metrics(synthetic_root, tmp_path):
    cli = main(["fit", *cli_args(synthetic_root, tmp_path, "--trainer.max_epochs=2",
                                 "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2",
                                 "--trainer.log_every_n_steps=1")])
    # Links: the data module's class count and geometry reached the model.
    assert cli.model.net.num_classes == K and cli.model.net.num_frames == 4 and cli.model.net.img_size == 64
    run = tmp_path / "smoke" / "version_0"
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert "last.ckpt" in ckpts and any(name.startswith("best-") for name in ckpts)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["init_args"]["network"]["attention"] == "dna" and saved["data"]["init_args"]["num_frames"] == 4

    rows = read_metrics(tmp_path, "version_0")
    columns = set().union(*rows)
    assert {"train/loss", "val/top1", "val/top5", "val/mca", "test/top1", "test/mca"} <= columns
    assert "alpha/blocks.0.attn" in columns and "alpha/blocks.1.temporal_attn" in columns
    test_row = next(r for r in rows if r.get("test/top1"))
    # Metrics per video: top-1 is a multiple of 1 / (number of test videos).
    top1 = float(test_row["test/top1"])
    assert abs(top1 * TEST_VIDEOS - round(top1 * TEST_VIDEOS)) < 1e-4
    assert float(test_row["test/failed_videos"]) == 0
    # The test report beside the run: its top-1 is the logged one, one CSV row per test video.
    report = json.loads((run / "test_metrics.json").read_text())
    assert report["top1"] == pytest.approx(top1, abs=1e-6) and report["class_names"] == list(SYNTHETIC_CLASSES)
    with open(run / "test_predictions.csv") as f:
        assert len(list(csv.DictReader(f))) == TEST_VIDEOS
    assert (run / "test_confusion.png").stat().st_size > 1000

    # The last checkpoint restores into validate and predict.
    last = run / "checkpoints" / "last.ckpt"
    state = torch.load(last, weights_only=False)
    assert state["epoch"] == 1 and "blocks.0.attn.neg_scalers" in {k.removeprefix("net.") for k in state["state_dict"]}
    # What label i means, and the data settings the model was trained with, travel with it.
    assert state["class_names"] == list(SYNTHETIC_CLASSES)
    data_settings = state["datamodule_hyper_parameters"]
    assert (data_settings["root"], data_settings["num_frames"], data_settings["crop_size"]) == (str(synthetic_root), 4, 64)
    assert data_settings["videos_per_subject_class"] == 1 and data_settings["test_num_crops"] == 3
    # Evaluations of a run's checkpoint log into a folder of that run (no new version
    # folder); the training's metrics and config stay as they were.
    main(["validate", *cli_args(synthetic_root, tmp_path, f"--ckpt_path={last}")])
    val_rows = read_metrics(tmp_path, "version_0/validate")
    assert any(r.get("val/top1") for r in val_rows)
    assert read_metrics(tmp_path, "version_0") == rows and yaml.safe_load((run / "config.yaml").read_text()) == saved
    main(["predict", *cli_args(synthetic_root, tmp_path, f"--ckpt_path={last}")])
    assert sorted(p.name for p in (tmp_path / "smoke").iterdir() if p.is_dir()) == ["version_0"]
    with open(tmp_path / "smoke" / "version_0" / "predict" / "predictions.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == TEST_VIDEOS  # one row per test video
    classes = list(SYNTHETIC_CLASSES)
    for row in rows:
        activity = row["path"].rsplit("/", 1)[1].split("_")[0]
        assert classes[int(row["label"])] == activity
        assert row["pred_name"] == classes[int(row["pred"])]
        ranked = [entry.split(":") for entry in row["top_k"].split()]
        assert int(ranked[0][0]) == int(row["pred"]) and len(ranked) == 5
        probs = [float(p) for _, p in ranked]
        # All 5 classes are listed, each rounded to 4 decimals: the sum is 1 within 5 half-units.
        assert probs == sorted(probs, reverse=True) and abs(sum(probs) - 1) <= 5 * 5e-5 + 1e-9


@pytest.mark.slow
def test_softmax_attention_is_one_option_away(synthetic_root, tmp_path):
    cli = main(["fit", *cli_args(synthetic_root, tmp_path, "--model.network.attention=softmax", "--trainer.max_epochs=1",
                                 "--trainer.limit_train_batches=1", "--trainer.limit_val_batches=1")])
    assert not any(k.endswith("neg_scalers") for k in cli.model.state_dict())
    assert cli.trainer.current_epoch == 1


def test_the_config_dump_without_its_second_validation_is_lightnings(synthetic_root, tmp_path):
    """DnACLI replaces Lightning's ``_dump_config`` (the dump that gives the model its class_path
    hyper-parameters) by one that skips validating the just-parsed config again: the same dump,
    and the method it replaces still exists in Lightning."""
    from lightning.pytorch.cli import LightningCLI

    assert "_dump_config" in vars(LightningCLI)
    cli = main(cli_args(synthetic_root, tmp_path, "--model.network.attention=softmax"), run=False)
    ours = cli.config_dump  # made while the model was instantiated
    assert ours["model"]["init_args"]["network"]["attention"] == "softmax"
    del cli.config_dump
    LightningCLI._dump_config(cli)
    assert ours == cli.config_dump


def test_help_documents_model_and_data_options(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = capsys.readouterr().out
    assert "--model" in text and "--test_after_fit" in text
    with pytest.raises(SystemExit):
        main(["fit", "--model.help", "dna_video.tasks.VideoClassifier"])
    text = capsys.readouterr().out
    assert "--model.network.attention" in text and "attention kind of both paths" in text
    with pytest.raises(SystemExit):
        main(["fit", "--data=dna_video.data.SyntheticSmarthome", "--data.help", "dna_video.data.SyntheticSmarthome"])
    text = capsys.readouterr().out
    assert "--data.sampling_rate" in text and "interval between sampled frames" in text
    # A command builds the parser of its subcommand alone; without one, every subcommand is listed.
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "{fit,validate,test,predict}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["test", "--help"])
    assert "[options] test [-c CONFIG]" in capsys.readouterr().out
    cli = DnACLI.__new__(DnACLI)
    for given, built in ((["test", "--config", "x.yaml"], {"test"}), (["--help"], {"fit", "validate", "test", "predict"})):
        cli.given_args = given
        assert set(cli.subcommands()) == built
    with pytest.raises(SystemExit):
        main(["tset"])
    assert "invalid choice: 'tset' (choose from 'fit', 'validate', 'test', 'predict')" in capsys.readouterr().err


@pytest.mark.slow
def test_checkpointing_off_and_a_plateau_schedule(synthetic_root, tmp_path):
    cli = main(["fit", *cli_args(synthetic_root, tmp_path, "--trainer.enable_checkpointing=false",
                                 "--trainer.max_epochs=2", "--trainer.limit_train_batches=1",
                                 "--trainer.limit_val_batches=1", "--test_after_fit=false",
                                 "--model.lr_scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau",
                                 "--model.lr_scheduler.init_args.patience=0",
                                 "--model.lr_scheduler.init_args.factor=0.5",
                                 "--model.schedule.warmup_steps=0")])
    assert cli.trainer.checkpoint_callback is None
    assert not list((tmp_path / "smoke" / "version_0").rglob("*.ckpt"))
    scheduler = cli.trainer.lr_scheduler_configs[0]
    assert scheduler.monitor == "val/loss"
    # Stepped on val/loss after each validation: its best value is the one it saw.
    assert scheduler.scheduler.best == pytest.approx(min(float(r["val/loss"]) for r in read_metrics(tmp_path, "version_0")
                                                         if r.get("val/loss")))


def test_fit_with_zero_epochs_says_that_nothing_is_trained(synthetic_root, tmp_path, caplog):
    caplog.set_level("WARNING", logger="dna_video")
    cli = main(["fit", *cli_args(synthetic_root, tmp_path, "--trainer.max_epochs=0", "--test_after_fit=false")])
    assert cli.trainer.global_step == 0
    assert "max_epochs / max_steps is 0: nothing will be trained" in caplog.text
