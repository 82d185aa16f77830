"""`python -m dna_video.tools.predict` on generated videos with a model trained in the test, and the
test report (metrics JSON, predictions CSV, confusion PNG) written by `test`."""

import csv
import json

import lightning as L
import numpy as np
import pytest
import torch
from PIL import Image

from analysis_trees import CLASSES, datamodule
from dna_video.prediction.torch_backend import load_model
from dna_video.training.callbacks.evaluation_report import EvaluationReportWriter
from dna_video.tasks.video import VideoClassifier
from dna_video.tools.predict import collect_videos, main


def test_checkpoint_carries_class_names_and_evaluation_settings(tiny_checkpoint):
    ckpt, settings = tiny_checkpoint
    state = torch.load(ckpt, weights_only=False)
    assert state["class_names"] == CLASSES
    # The DataModule's test settings, read from its saved arguments (analysis_trees.datamodule).
    assert settings == {"num_frames": 4, "sampling_rate": 2, "target_fps": None, "sampling": "clip",
                        "short_video": "clamp", "crop_size": 32, "mean": (0.5,) * 3, "std": (0.25,) * 3,
                        "num_clips": 1, "num_crops": 3, "decoder": "decord"}
    model = load_model(ckpt, crop_size=None, num_clips=2)
    assert model.settings_from == "the checkpoint" and model.class_names == CLASSES
    assert model.settings.num_clips == 2 and model.settings.crop_size == 32  # override / kept
    # The rebuilt network gives the trained module's logits.
    module = VideoClassifier.load_from_checkpoint(ckpt, map_location="cpu").eval()
    video = torch.randn(1, 3, 4, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.net(video), module(video))


def test_predict_gives_the_learned_classes_and_names_an_unreadable_file(tiny_checkpoint, new_videos, tmp_path, capsys,
                                                                       caplog):
    ckpt, _ = tiny_checkpoint
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video at all")
    out = tmp_path / "pred.csv"
    feats = tmp_path / "feats.npy"
    code = main([str(ckpt), str(new_videos["dark"]), str(broken), str(new_videos["bright"]),
                 "--out", str(out), "--features", str(feats), "--top-k", "2"])
    assert code == 0
    captured = capsys.readouterr()
    # The file is named in one logged line (the command's log goes to stderr); the summary counts.
    assert f"cannot read {broken}: not a video (18 bytes, starts with 'not a video at a')" in caplog.text
    assert "1 of 3 videos could not be read" in captured.err
    assert "Dark" in captured.out and "Bright" in captured.out  # the printed table
    with open(out) as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == ["path", "label", "pred", "pred_name", "prob", "top_k"]
        rows = {r["path"]: r for r in reader}
    assert set(rows) == {str(new_videos["dark"]), str(new_videos["bright"])}
    assert rows[str(new_videos["dark"])]["pred_name"] == "Dark"
    assert rows[str(new_videos["bright"])]["pred_name"] == "Bright"
    for row in rows.values():
        ranked = [entry.split(":") for entry in row["top_k"].split()]
        assert len(ranked) == 2 and float(ranked[0][1]) + float(ranked[1][1]) == pytest.approx(1, abs=1e-3)
        assert float(row["prob"]) > 0.5 and row["label"] == ""
    table = np.load(feats)
    assert list(table["path"]) == [str(new_videos["dark"]), str(new_videos["bright"])]
    assert table["features"].shape == (2, 16)
    # The features are the mean over the views of the pre-head embedding: the head of the
    # mean feature ranks the classes as the CSV does (the head is linear).
    model = load_model(ckpt)
    logits = model.net.head(torch.from_numpy(table["features"]))
    assert logits.argmax(1).tolist() == [0, 1]


def test_predict_json_list_file_and_errors(tiny_checkpoint, new_videos, tmp_path):
    ckpt, _ = tiny_checkpoint
    listing = tmp_path / "videos.txt"
    listing.write_text(f"# two videos, one with a label\n{new_videos['dark']} 0\n{new_videos['bright']}\n")
    assert collect_videos([str(listing)]) == [(str(new_videos["dark"]), 0), (str(new_videos["bright"]), None)]
    assert [p for p, _ in collect_videos([str(new_videos["dark"].parent)])] == sorted(
        str(p) for p in new_videos.values())
    out = tmp_path / "pred.json"
    feats = tmp_path / "feats.pt"
    assert main([str(ckpt), str(listing), "--out", str(out), "--features", str(feats), "--crops", "1"]) == 0
    data = json.loads(out.read_text())
    assert data["class_names"] == CLASSES and data["failed"] == [] and data["settings"]["num_crops"] == 1
    assert [(p["label"], p["pred_name"]) for p in data["predictions"]] == [(0, "Dark"), (None, "Bright")]
    assert [c["name"] for c in data["predictions"][0]["top_k"]] == ["Dark", "Bright"]
    saved = torch.load(feats)
    assert saved["paths"] == [str(new_videos["dark"]), str(new_videos["bright"])] and saved["features"].shape == (2, 16)
    with pytest.raises(SystemExit, match="no such file or folder: .*missing.mp4"):
        main([str(ckpt), str(tmp_path / "missing.mp4")])
    with pytest.raises(SystemExit, match="checkpoint not found"):
        main([str(tmp_path / "nothing.ckpt"), str(new_videos["dark"])])
    broken = tmp_path / "only_broken.mp4"
    broken.write_bytes(b"")
    assert main([str(ckpt), str(broken)]) == 1  # nothing could be read


def test_test_report_files_match_an_independent_count(tiny_checkpoint, tmp_path):
    ckpt, _ = tiny_checkpoint
    root = ckpt.parent.parent  # the tiny model's dataset folder
    writer = EvaluationReportWriter(folder=str(tmp_path / "report"))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[writer])
    model = VideoClassifier.load_from_checkpoint(ckpt, map_location="cpu")
    trainer.test(model, datamodule=datamodule(root))
    report = json.loads((tmp_path / "report" / "test_metrics.json").read_text())
    for key in ("top1", "top5", "mca", "per_class_accuracy", "confusion_matrix", "ece", "rms_calibration_error",
                "aurra", "class_names", "num_videos"):
        assert key in report
    with open(tmp_path / "report" / "test_predictions.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == report["num_videos"] == 6 and report["class_names"] == CLASSES
    # Hand count from the CSV: accuracy, per class, confusion.
    right = [r["label"] == r["pred"] for r in rows]
    assert report["top1"] == pytest.approx(sum(right) / 6)
    assert report["top1"] == pytest.approx(trainer.callback_metrics["test/top1"].item())
    for label, name in enumerate(CLASSES):
        mine = [r for r in rows if int(r["label"]) == label]
        assert report["per_class_accuracy"][name] == pytest.approx(sum(r["pred"] == r["label"] for r in mine) / len(mine))
        for pred in range(2):
            assert report["confusion_matrix"][label][pred] == sum(int(r["pred"]) == pred for r in mine)
    image = Image.open(tmp_path / "report" / "test_confusion.png")
    image.load()
    assert image.width > 200 and np.asarray(image.convert("RGB")).std() > 10


@pytest.mark.slow
def test_test_report_under_ddp_gathers_every_video_once(tiny_checkpoint, tmp_path):
    """Two processes (gloo on CPU): each tests half of the videos; rank 0 writes the report of
    all of them, each once. The processes are forked (``ddp_fork``): the same DDP code as
    ``ddp_spawn`` without each process importing torch and Lightning again (3x less CPU)."""
    ckpt, _ = tiny_checkpoint
    root = ckpt.parent.parent
    single = tmp_path / "single"
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[EvaluationReportWriter(folder=str(single))])
    trainer.test(VideoClassifier.load_from_checkpoint(ckpt, map_location="cpu"), datamodule=datamodule(root))
    ddp = tmp_path / "ddp"
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[EvaluationReportWriter(folder=str(ddp))])
    trainer.test(VideoClassifier.load_from_checkpoint(ckpt, map_location="cpu"), datamodule=datamodule(root))

    def rows(folder):
        with open(folder / "test_predictions.csv") as f:
            return sorted((r["path"], r["pred"], round(float(r["prob"]), 4)) for r in csv.DictReader(f))

    assert rows(ddp) == rows(single) and len(rows(ddp)) == 6  # every video once, same predictions
    one, two = (json.loads((folder / "test_metrics.json").read_text()) for folder in (single, ddp))
    assert two["confusion_matrix"] == one["confusion_matrix"] and two["top1"] == pytest.approx(one["top1"])


def test_settings_of_an_older_checkpoint_come_from_its_run_config_else_defaults(tiny_checkpoint, tmp_path, caplog):
    ckpt, _ = tiny_checkpoint
    state = torch.load(ckpt, weights_only=False)
    del state["datamodule_hyper_parameters"], state["class_names"]
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    older = run / "checkpoints" / "old.ckpt"
    torch.save(state, older)
    caplog.set_level("WARNING")
    model = load_model(older)  # no config.yaml: the model's geometry and the DataModule defaults
    assert model.settings_from == "defaults" and "states no evaluation data settings" in caplog.text
    assert (model.settings.num_frames, model.settings.crop_size, model.settings.sampling_rate) == (4, 32, 32)
    assert model.class_names == ["class_0", "class_1"]
    (run / "config.yaml").write_text(
        "data:\n  class_path: dna_video.data.VideoListDataModule\n  init_args:\n    root: x\n    num_frames: 4\n"
        "    sampling_rate: 2\n    target_fps: null\n    crop_size: 32\n    mean: [0.5, 0.5, 0.5]\n"
        "    std: [0.25, 0.25, 0.25]\n    test_num_crops: 1\n"
    )
    model = load_model(older)
    assert model.settings_from == str(run / "config.yaml")
    assert model.settings == load_model(ckpt).settings.replace(num_crops=1)
    # (review of issue 36) kept outside a run (~/models/x.ckpt), a config.yaml two folders up is
    # somebody else's (~/config.yaml): not read
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "config.yaml").write_text((run / "config.yaml").read_text())
    elsewhere = home / "models" / "x.ckpt"
    torch.save(state, elsewhere)
    assert load_model(elsewhere).settings_from == "defaults"


def test_subspaces_of_a_reference_layout_checkpoint(tiny_checkpoint, tmp_path):
    """A checkpoint in the DnA reference's own layout (no hyper-parameters) is read by the
    importer: the same records as from the .ckpt it was exported from."""
    from dna_video.analysis.subspaces import subspace_records
    from dna_video.export.reference import export_reference

    ckpt, _ = tiny_checkpoint
    net = load_model(ckpt).net
    exported = export_reference(net, tmp_path / "tiny.pyth")
    again = load_model(exported, warn_defaults=False).net
    records, expected = subspace_records(again), subspace_records(net)
    assert len(records) == len(expected) == 8
    for a, b in zip(records, expected):
        assert a["module"] == b["module"] and a["mean_deg"] == pytest.approx(b["mean_deg"])
        assert a["frobenius"] == pytest.approx(b["frobenius"]) and a["alpha"] == pytest.approx(b["alpha"])


@pytest.mark.parametrize("top_k", ["0", "-2"])
def test_predict_refuses_a_top_k_below_one_in_one_line(top_k, capsys):
    with pytest.raises(SystemExit) as info:
        main(["model.ckpt", "clip.mp4", "--top-k", top_k])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"dna-video predict: error: argument --top-k: must be at least 1, got {top_k}"


@pytest.mark.parametrize("task, checkpoint", [
    ("ProbeClassifierModule", "probe/version_0/checkpoints/last.ckpt"),
    ("ImageClassifier", "image/version_0/checkpoints/best-00.ckpt"),
])
def test_predict_and_analyze_name_a_checkpoint_of_another_task_in_one_line(task, checkpoint, tmp_path):
    from pathlib import Path

    from dna_video.tools.analyze import main as analyze

    path = Path(__file__).parent / "fixtures" / "v0_1" / "runs" / checkpoint
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"")  # never read: the checkpoint is refused first
    with pytest.raises(SystemExit) as info:
        main([str(path), str(video)])
    message = str(info.value)
    assert message.count("\n") == 0 and f"a checkpoint of {task}" in message
    assert f"dna-video test --config <its run>/config.yaml --ckpt_path {path}" in message
    with pytest.raises(SystemExit) as info:
        analyze(["maps", str(path), str(video), "--out", str(tmp_path / "maps")])
    assert str(info.value) == message


@pytest.mark.parametrize("asked", [["--help"], ["-h"]])
def test_predict_help_shows_the_file_modes_options_and_the_config_mode(asked, capsys, monkeypatch):
    """``dna-video predict --help`` is the tool's help (not LightningCLI's ~700 lines): the file
    mode's options and how the config mode is used and its options seen; ``predict --config C``
    (an option first) still goes to LightningCLI, its ``--help`` too."""
    import sys
    from types import SimpleNamespace

    from dna_video.__main__ import main as dna_video

    given = []
    monkeypatch.setitem(sys.modules, "dna_video.training.cli", SimpleNamespace(console_main=given.append))
    with pytest.raises(SystemExit) as stop:
        dna_video(["predict", *asked])
    assert stop.value.code == 0 and given == []
    text = capsys.readouterr().out
    assert text.startswith("usage: dna-video predict [-h]") and len(text.splitlines()) < 120
    for option in ("--timeline", "--stream", "--out", "--smooth", "--stride", "--annotate", "--no-drop", "--crops"):
        assert f"  {option}" in text, option
    assert "dna-video predict --config C --ckpt_path K" in text and "dna-video predict --config C --help" in text
    dna_video(["predict", "--config", "c.yaml", "--help"])
    dna_video(["predict", "--config", "c.yaml", "--ckpt_path", "k.ckpt"])
    assert given == [["predict", "--config", "c.yaml", "--help"], ["predict", "--config", "c.yaml", "--ckpt_path", "k.ckpt"]]


@pytest.mark.parametrize("args, tool", [
    (["--top-k", "3", "model.ckpt", "clip.mp4"], True),
    (["--top-k=3", "--stream", "model.onnx", "rtsp://camera"], True),
    (["--crops", "1", "--timeline", "--stride", "8f", "model.ckpt", "long.mp4"], True),
    (["--top", "3", "model.ckpt", "clip.mp4"], True),  # argparse's abbreviation
    (["--input-option", "rtsp_transport=tcp", "--stream", "model.ckpt", "rtsp://camera"], True),
    (["--top-k", "3", "--", "model.ckpt", "clip.mp4"], True),
    (["--top-k", "3", "--help"], True),
    (["--top-k", "3"], True),  # the tool says the checkpoint is missing
    (["model.ckpt", "--top-k", "3", "clip.mp4"], True),
    (["--config", "c.yaml", "--ckpt_path", "k.ckpt"], False),
    (["--ckpt_path", "k.ckpt", "--config", "c.yaml"], False),
    (["--trainer.accelerator=cpu", "--config", "c.yaml"], False),
    (["-c", "c.yaml"], False),
])
def test_predict_file_mode_is_recognised_wherever_its_options_sit(args, tool, monkeypatch):
    """(review finding 13) ``dna-video predict --top-k 3 CKPT VIDEO`` is the file mode: the
    tool's options may come before the checkpoint; an option of LightningCLI's predict first is
    the config mode."""
    import sys
    from types import SimpleNamespace

    from dna_video import __main__

    ran = []
    monkeypatch.setitem(sys.modules, "dna_video.training.cli", SimpleNamespace(console_main=lambda a: ran.append("config")))
    monkeypatch.setattr(__main__, "TOOLS", {**__main__.TOOLS, "predict": "fake_predict_tool"})
    monkeypatch.setitem(sys.modules, "fake_predict_tool", SimpleNamespace(main=lambda a: ran.append("tool") or 0))
    if tool:
        with pytest.raises(SystemExit):
            __main__.main(["predict", *args])
    else:
        __main__.main(["predict", *args])
    assert ran == ["tool" if tool else "config"]
