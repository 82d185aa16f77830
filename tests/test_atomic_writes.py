"""Every result file is written whole or not at all: a command that fails while writing leaves
the earlier file as it was and no temporary file behind (dna_video.common.atomic).

Each writer runs with its final rename failing (the last moment a write can fail): a writer
that wrote in place would already have replaced the earlier content.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dna_video.common import atomic
from dna_video.common.atomic import PARTIAL_MARK, atomic_path, write_json, write_text

EARLIER = b"{\"earlier result\": true}\n"  # JSON: writers that update a file read it first


class SimulatedFailure(OSError):
    pass


@pytest.fixture
def failing_rename(monkeypatch):
    """Make the rename onto files named in ``names`` fail; returns the set to fill."""
    names: set[str] = set()
    real = os.replace

    def replace(src, dst):
        if Path(dst).name in names:
            raise SimulatedFailure(f"simulated failure writing {dst}")
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    return names


def _earlier(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(EARLIER)
    return path


def _assert_untouched(path: Path) -> None:
    assert path.read_bytes() == EARLIER, f"{path} was changed by a failed write"
    leftovers = [p.name for p in path.parent.iterdir() if PARTIAL_MARK in p.name]
    assert leftovers == [], f"temporary files left behind: {leftovers}"


# -- the helper -----------------------------------------------------------------------------


def test_atomic_path_replaces_on_success_and_keeps_the_suffix(tmp_path):
    target = _earlier(tmp_path / "a" / "result.npy")
    with atomic_path(target) as partial:
        assert partial.parent == target.parent and partial.suffix == ".npy" and PARTIAL_MARK in partial.name
        assert not partial.exists()
        np.save(partial, np.arange(3))  # np.save appends .npy to other names: the suffix must be kept
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.npy"]


def test_atomic_path_keeps_the_earlier_file_when_the_writer_raises(tmp_path):
    target = _earlier(tmp_path / "result.json")
    with pytest.raises(RuntimeError, match="half way"):
        with atomic_path(target) as partial:
            partial.write_text('{"half":')
            raise RuntimeError("half way")
    _assert_untouched(target)


def test_a_writer_that_writes_nothing_is_an_error(tmp_path):
    target = _earlier(tmp_path / "result.json")
    with pytest.raises(FileNotFoundError, match="wrote nothing"):
        with atomic_path(target):
            pass
    _assert_untouched(target)


def test_write_json_of_a_value_that_is_not_json_leaves_no_file(tmp_path):
    with pytest.raises(TypeError):
        write_json(tmp_path / "x.json", {"a": object()})
    assert list(tmp_path.iterdir()) == []
    write_text(tmp_path / "y.txt", "hello")
    assert (tmp_path / "y.txt").read_text() == "hello"


# -- every writer -------------------------------------------------------------------------------


def _fake_trainer(folder: Path, **extra):
    strategy = SimpleNamespace(broadcast=lambda value, src=0: value)
    return SimpleNamespace(log_dir=str(folder), is_global_zero=True, world_size=1, strategy=strategy,
                           datamodule=None, ckpt_path=None, callback_metrics={}, checkpoint_callbacks=[], **extra)


def _outputs():
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    return {"path": ["a.mp4", "b.mp4", "c.mp4"], "label": torch.tensor([0, 1, 1]), "probs": probs,
            "pred": probs.argmax(1)}


def write_summary(folder: Path) -> Path:
    from dna_video.training.callbacks.run_summary import RunSummary

    RunSummary()._update(_fake_trainer(folder), fit={"best_checkpoint": "x"})
    return folder / "summary.json"


def _evaluation_report(folder: Path, name: str) -> Path:
    from dna_video.training.callbacks.evaluation_report import EvaluationReportWriter

    writer = EvaluationReportWriter()
    writer.on_test_epoch_start(None, None)
    writer.on_test_batch_end(None, None, _outputs(), None, 0)
    writer.on_test_epoch_end(_fake_trainer(folder), SimpleNamespace(class_names=["a", "b", "c"]))
    return folder / name


def write_test_metrics(folder: Path) -> Path:
    return _evaluation_report(folder, "test_metrics.json")


def write_test_predictions(folder: Path) -> Path:
    return _evaluation_report(folder, "test_predictions.csv")


def write_test_confusion(folder: Path) -> Path:
    return _evaluation_report(folder, "test_confusion.png")


def write_predictions(folder: Path) -> Path:
    from dna_video.training.callbacks.predictions import write_predictions_csv

    assert write_predictions_csv(folder / "predictions.csv", [_outputs()], ["a", "b", "c"], 2) == 3
    return folder / "predictions.csv"


def write_features_npy(folder: Path) -> Path:
    from dna_video.tools.predict import write_features

    return write_features(folder / "features.npy", ["a.mp4", "b.mp4"], torch.ones(2, 4))


def write_features_pt(folder: Path) -> Path:
    from dna_video.tools.predict import write_features

    return write_features(folder / "features.pt", ["a.mp4", "b.mp4"], torch.ones(2, 4))


def write_checkpoint(folder: Path) -> Path:
    from dna_video.training.runs import AtomicCheckpointIO

    AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.ones(2)}}, folder / "last.ckpt")
    return folder / "last.ckpt"


def write_config(folder: Path) -> Path:
    from jsonargparse import ArgumentParser

    from dna_video.training.runs import AtomicSaveConfig

    parser = ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    callback = AtomicSaveConfig(parser, parser.parse_args(["--lr", "0.5"]))
    callback.setup(_fake_trainer(folder), None, "fit")
    return folder / "config.yaml"


def _tiny_timesformer(attention: str):
    from dna_video.models.timesformer import TimeSformer

    return TimeSformer(num_classes=3, num_frames=2, img_size=32, patch_size=16, embed_dim=32, depth=1, num_heads=2,
                       attention=attention)


def write_reference_export(folder: Path) -> Path:
    from dna_video.export.reference import export_reference

    return export_reference(_tiny_timesformer("dna"), folder / "model.pyth")


def write_hf_weights(folder: Path) -> Path:
    from dna_video.export.huggingface import export_huggingface

    export_huggingface(_tiny_timesformer("softmax"), folder, ["a", "b", "c"])
    return folder / "model.safetensors"


def write_hf_config(folder: Path) -> Path:
    from dna_video.export.huggingface import export_huggingface

    export_huggingface(_tiny_timesformer("softmax"), folder, ["a", "b", "c"])
    return folder / "config.json"


WRITERS = [
    write_summary, write_test_metrics, write_test_predictions, write_test_confusion, write_predictions,
    write_features_npy, write_features_pt, write_checkpoint, write_config, write_reference_export,
    write_hf_weights, write_hf_config,
]


@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.__name__)
def test_a_failed_write_leaves_the_earlier_file(writer, tmp_path, failing_rename):
    # First a successful write, to learn the file's name and check it is written at all.
    written = writer(tmp_path / "ok")
    assert written.is_file() and written.stat().st_size > 0 and written.read_bytes() != EARLIER
    target = _earlier(tmp_path / "failing" / written.name)
    failing_rename.add(written.name)
    with pytest.raises(SimulatedFailure):
        writer(target.parent)
    _assert_untouched(target)


def test_subspace_and_map_files_of_analyze_are_written_whole(tiny_checkpoint, new_videos, tmp_path, failing_rename):
    from dna_video.tools.analyze import run_maps, run_subspaces

    ckpt, _ = tiny_checkpoint
    for name in ("subspaces.json",):
        target = _earlier(tmp_path / "subspaces" / name)
        failing_rename.add(name)
        with pytest.raises(SimulatedFailure):
            run_subspaces(str(ckpt), str(target.parent))
        _assert_untouched(target)
    ok = run_maps(str(ckpt), str(new_videos["dark"]), str(tmp_path / "maps_ok"))
    tensors = Path(ok["tensors"])
    assert torch.load(tensors, weights_only=False)["spatial"]
    target = _earlier(tmp_path / "maps" / tensors.name)
    failing_rename.add(tensors.name)
    with pytest.raises(SimulatedFailure):
        run_maps(str(ckpt), str(new_videos["dark"]), str(target.parent))
    _assert_untouched(target)


@pytest.mark.parametrize("out_name", ["predictions.csv", "predictions.json", "features.npy"])
def test_predict_where_every_video_fails_keeps_the_earlier_outputs(out_name, tiny_checkpoint, tmp_path, capsys):
    from dna_video.tools.predict import main

    ckpt, _ = tiny_checkpoint
    target = _earlier(tmp_path / out_name)
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video at all")
    option = "--features" if out_name.endswith(".npy") else "--out"
    assert main([str(ckpt), str(broken), option, str(target)]) == 1
    _assert_untouched(target)
    assert f"{target} not written" in capsys.readouterr().err


def test_predict_writes_its_outputs_when_videos_are_read(tiny_checkpoint, new_videos, tmp_path):
    from dna_video.tools.predict import main

    ckpt, _ = tiny_checkpoint
    out, features = _earlier(tmp_path / "p.json"), _earlier(tmp_path / "f.npy")
    assert main([str(ckpt), str(new_videos["dark"]), "--out", str(out), "--features", str(features)]) == 0
    assert [r["path"] for r in json.loads(out.read_text())["predictions"]] == [str(new_videos["dark"])]
    assert np.load(features)["path"].tolist() == [str(new_videos["dark"])]
