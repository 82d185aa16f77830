"""The ready experiments of configs/: the paper's recipe as LightningCLI resolves it, and `cli.py fit` end to
end with the real config files on mini Toyota Smarthome and NTU RGB+D trees (with a tiny
model and small clips so that it runs on a CPU in seconds)."""

import csv
from pathlib import Path

import pytest
import torch

from dna_video.training.cli import main
from dna_video.tasks.video import VideoClassifier

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="session")
def parser(synthetic_root):
    """The CLI's parser (built by a run=False CLI on the tiny quickstart), to resolve configs
    without building their TimeSformer-B."""
    return main(["--config", "configs/quickstart.yaml", f"--data.init_args.root={synthetic_root}",
                 "--trainer.logger=false"], run=False).parser


@pytest.mark.parametrize("name", ["toyota_cs", "toyota_cv1", "toyota_cv2", "ntu60_cs", "ntu60_cv"])
def test_configs_resolve_to_the_paper_recipe(parser, name):
    """Each file states only its own; what LightningCLI resolves from it and the defaults of the
    model, the DataModule and cli.py is the paper's recipe (dna.md), as the files stated it
    in full before."""
    config = parser.parse_args(["--config", str(CONFIGS / f"{name}.yaml"), "--data.init_args.root=/data/x"]).as_dict()
    model, data, trainer = config["model"]["init_args"], config["data"]["init_args"], config["trainer"]
    assert config["model"]["class_path"] == "dna_video.tasks.VideoClassifier"
    network, evaluation = model["network"], model["evaluation"]
    dataset, protocol = name.split("_")
    assert config["data"]["class_path"] == {"toyota": "dna_video.data.ToyotaSmarthome", "ntu60": "dna_video.data.NTURGBD60"}[dataset]
    assert data["protocol"] == protocol and data["root"] == "/data/x"
    assert (network["arch"], network["attention"], network["drop_path_rate"], network["head_dropout"]) == ("base", "dna", 0.1, 0.5)
    assert (evaluation["view_aggregation"], evaluation["aggregate"], model["init"]["source"], model["schedule"]["warmup_steps"]) == (
        "sum", "logits", None, 0)
    assert model["optimizer"]["class_path"] == "torch.optim.SGD"
    sgd = model["optimizer"]["init_args"]
    assert (sgd["lr"], sgd["momentum"], sgd["weight_decay"], sgd["nesterov"]) == (0.005, 0.9, 0.0001, False)
    assert model["lr_scheduler"]["class_path"] == "torch.optim.lr_scheduler.MultiStepLR"
    assert {k: model["lr_scheduler"]["init_args"][k] for k in ("milestones", "gamma")} == {"milestones": [11, 14], "gamma": 0.1}
    assert model["schedule"]["interval"] == "epoch"
    assert (trainer["max_epochs"], trainer["devices"], trainer["accelerator"], trainer["log_every_n_steps"]) == (15, 1, "auto", 50)
    assert trainer["logger"]["class_path"] == "lightning.pytorch.loggers.TensorBoardLogger"
    assert (trainer["logger"]["init_args"]["save_dir"], trainer["logger"]["init_args"]["name"]) == ("runs", name)
    assert (config["seed_everything"], config["test_after_fit"]) == (0, True)
    assert (data["num_frames"], data["sampling_rate"], data["target_fps"], list(data["train_short_side"]), data["crop_size"]) == (
        8, 32, 30.0, [256, 320], 224)
    assert (list(data["mean"]), list(data["std"])) == ([0.45] * 3, [0.225] * 3)
    assert (data["batch_size"], data["num_workers"]) == (8, 8)
    # Views: 1 clip x 3 crops in test, and in validation as the files stated.
    assert (data["test_num_clips"], data["test_num_crops"], data["val_num_clips"], data["val_num_crops"]) == (1, 3, 1, 3)
    # Linked to the model from the DataModule.
    assert (model["num_frames"], model["img_size"]) == (8, 224)
    assert (config["checkpoint"]["monitor"], config["checkpoint"]["mode"]) == (
        "val/mca" if dataset == "toyota" else "val/top1", "max")
    if dataset == "ntu60":
        assert (data["val_fraction"], data["exclude_file"]) == (0.05, None)


def tiny(root, log_dir, name):
    return [
        f"--data.init_args.root={root}",
        "--model.network.arch=tiny",
        "--model.network.embed_dim=32", "--model.network.num_heads=2", "--model.network.depth=1",
        "--data.init_args.num_frames=2",
        "--data.init_args.sampling_rate=4",
        "--data.init_args.train_short_side=[32, 40]",
        "--data.init_args.crop_size=32",
        "--data.init_args.batch_size=4",
        "--data.init_args.num_workers=0",
        "--trainer.accelerator=cpu",
        "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=2",
        "--trainer.log_every_n_steps=1",
        "--trainer.enable_progress_bar=false",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={log_dir}",
        f"--trainer.logger.init_args.name={name}",
    ]


def assert_test_metrics_match_a_hand_count(cli, test_row, videos):
    """The logged test/top1 and test/mca against a count, by hand, of the tested (best)
    checkpoint's predictions on the test split."""
    model = VideoClassifier.load_from_checkpoint(cli.trainer.checkpoint_callback.best_model_path).eval()
    labels, preds = [], []
    with torch.no_grad():
        for batch in cli.datamodule.test_dataloader():
            labels += batch["label"].tolist()
            preds += model.predict_step(batch, 0)["pred"].tolist()
    assert len(labels) == videos
    correct = [p == y for p, y in zip(preds, labels)]
    assert float(test_row["test/top1"]) == pytest.approx(sum(correct) / videos, abs=1e-6)
    per_class = {y: [c for c, z in zip(correct, labels) if z == y] for y in set(labels)}
    mca = sum(sum(c) / len(c) for c in per_class.values()) / len(per_class)
    assert float(test_row["test/mca"]) == pytest.approx(mca, abs=1e-6)


def run_fit(config, root, log_dir):
    name = Path(config).stem
    cli = main(["fit", "--config", config, *tiny(root, log_dir, name)])
    run = log_dir / name / "version_0"
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return cli, run, rows


@pytest.mark.slow
def test_fit_toyota_cs_end_to_end(smarthome_tree, tmp_path):
    root, _ = smarthome_tree
    cli, run, rows = run_fit("configs/toyota_cs.yaml", root, tmp_path)
    assert cli.model.net.num_classes == 31 and cli.datamodule.protocol.name == "cs"
    assert any(p.name.startswith("best-") for p in (run / "checkpoints").iterdir())  # chosen on val/mca
    test = next(r for r in rows if r.get("test/mca"))
    # The 16 cs test videos of the mini tree, each a batch entry of 1 clip x 3 crops (the
    # per-video aggregation itself is tested in test_multiview.py).
    assert len(cli.datamodule.datasets["test"]) == 16
    assert next(iter(cli.datamodule.test_dataloader()))["video"].shape[1:3] == (3, 3)
    assert float(test["test/failed_videos"]) == 0
    assert any(r.get("val/mca") for r in rows)
    assert_test_metrics_match_a_hand_count(cli, test, videos=16)


@pytest.mark.slow
def test_fit_ntu60_cs_end_to_end(ntu_tree, tmp_path):
    root, _ = ntu_tree
    cli, run, rows = run_fit("configs/ntu60_cs.yaml", root, tmp_path)
    assert cli.model.net.num_classes == 60
    # val_fraction 0.05 holds out no performance of the mini tree (2 per action): validation
    # falls back to the test split, 19 videos.
    assert len(cli.datamodule.datasets["val"]) == len(cli.datamodule.datasets["test"]) == 19
    test = next(r for r in rows if r.get("test/top1"))
    assert float(test["test/failed_videos"]) == 0
    assert_test_metrics_match_a_hand_count(cli, test, videos=19)
