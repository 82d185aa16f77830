"""Class-per-folder splits (``<split>/<class>/<video>``) in the list-file DataModule, listed
by pytorchvideo's LabeledVideoPaths: labels by folder name, through a DataModule and the CLI."""

import csv
from pathlib import Path

import pytest
import torch

from dna_video.training.cli import main
from dna_video.data import VideoListDataModule
from dna_video.data.listfile import CLASS_FOLDER_REASON

SMALL = dict(num_workers=0, batch_size=2, num_frames=4, sampling_rate=2, train_short_side=(32, 40), crop_size=32)


@pytest.fixture(scope="session")
def tree(tmp_path_factory):
    from video_trees import build_class_folder_tree

    root = tmp_path_factory.mktemp("class_folders")
    return root, build_class_folder_tree(root)


def labels_by_relpath(dm, split, root):
    return {str(Path(r.path).relative_to(root)): r.label for r in dm.datasets[split].records}


def test_folder_names_are_the_classes_and_label_every_split_alike(tree):
    root, facts = tree
    # Split folders relative to the root; no class-names file.
    dm = VideoListDataModule(str(root), train_list="train", val_list="val", **SMALL)
    assert dm.class_names == facts["classes"] == ["jump", "run", "walk"]
    dm.setup("fit")
    for split in ("train", "val"):
        expected = {path: facts["classes"].index(name) for path, name in facts[split].items()}
        assert labels_by_relpath(dm, split, root) == expected
        assert dm.summaries[split].excluded == {CLASS_FOLDER_REASON: len(facts["left_out"][split])}
    # val has no `run`: its walk videos keep the dataset's label 2, not their folder's index 1.
    assert set(labels_by_relpath(dm, "val", root).values()) == {0, 2}
    assert dm.summaries["train"].class_counts == {0: 2, 1: 2, 2: 2}

    records = dm.datasets["train"].records
    batch = next(iter(dm.train_dataloader()))
    assert batch["video"].shape == (2, 3, 4, 32, 32) and batch["video"].dtype == torch.float32
    assert batch["label"].tolist() == [records[i].label for i in batch["index"].tolist()]
    assert batch["label"].tolist() == [facts["classes"].index(Path(p).parent.name) for p in batch["path"]]


def test_a_class_file_fixes_the_order_and_bad_layouts_fail_clearly(tree, tmp_path):
    root, facts = tree
    classes = tmp_path / "classes.txt"
    classes.write_text("walk\nrun\njump\nswim\n")
    dm = VideoListDataModule(str(root), str(classes), str(root / "train"), str(root / "val"), **SMALL)
    dm.setup("validate")
    assert dm.num_classes == 4
    assert labels_by_relpath(dm, "val", root) == {p: ["walk", "run", "jump"].index(n) for p, n in facts["val"].items()}

    classes.write_text("walk\njump\n")
    with pytest.raises(ValueError, match=r"train: class folders \['run'\] are not in the class list"):
        VideoListDataModule(str(root), str(classes), "train", "val", **SMALL).setup("fit")
    (tmp_path / "val.txt").write_text("val/walk/w3.mp4 2\n")
    with pytest.raises(ValueError, match=r"classes is unset.*'val': '.*val.txt'"):
        VideoListDataModule(str(root), None, "train", str(tmp_path / "val.txt"), **SMALL)
    (tmp_path / "empty" / "walk").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"empty: Found no valid file for the classes walk.*Every class folder needs"):
        VideoListDataModule(str(tmp_path), None, None, "empty", **SMALL).setup("test")


@pytest.mark.slow
def test_cli_trains_and_predicts_on_class_folders(tree, tmp_path):
    root, facts = tree
    args = [
        "--data=dna_video.data.VideoListDataModule",
        f"--data.root={root}", "--data.train_list=train", "--data.val_list=val",
        "--data.num_workers=0", "--data.batch_size=2", "--data.num_frames=4", "--data.sampling_rate=2",
        "--data.train_short_side=[32, 40]", "--data.crop_size=32", "--data.test_num_crops=1",
        "--model.network.arch=tiny", "--model.network.embed_dim=32", "--model.network.num_heads=2", "--model.network.depth=1",
        "--trainer.accelerator=cpu", "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={tmp_path}", "--trainer.logger.init_args.name=folders",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
    ]
    cli = main(["fit", *args, "--trainer.max_epochs=1"])
    assert cli.model.hparams.num_classes == 3  # linked from the folder names
    assert cli.trainer.state.finished
    last = tmp_path / "folders" / "version_0" / "checkpoints" / "last.ckpt"
    main(["predict", *args, f"--ckpt_path={last}"])
    with open(tmp_path / "folders" / "version_0" / "predict" / "predictions.csv") as f:  # inside the checkpoint's run
        rows = list(csv.DictReader(f))
    # Predict reads the test split, here the val folder: one row per video, true label by folder.
    assert sorted(str(Path(r["path"]).relative_to(root)) for r in rows) == sorted(facts["val"])
    for row in rows:
        assert facts["classes"][int(row["label"])] == Path(row["path"]).parent.name
        assert row["pred_name"] == facts["classes"][int(row["pred"])]


@pytest.mark.slow
def test_kinetics_config_reads_class_folders_with_the_recipe(tree):
    """configs/kinetics400.yaml: classes from the folder names, the val folder tested, the K400 recipe."""
    root, facts = tree
    cli = main(["--config", "configs/kinetics400.yaml", f"--data.init_args.root={root}",
                "--data.init_args.num_workers=0"], run=False)
    data = cli.datamodule
    data.setup("test")
    assert data.class_names == facts["classes"]
    assert sorted(str(Path(r.path).relative_to(root)) for r in data.datasets["test"].records) == sorted(facts["val"])
    recipe = cli.config
    assert (recipe.trainer.max_epochs, recipe.model.init_args.optimizer.init_args.lr, recipe.data.init_args.sampling_rate,
            recipe.data.init_args.test_num_crops) == (15, 0.005, 32, 3)
