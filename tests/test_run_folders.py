"""Runs never overwrite or mix each other: a run folder is claimed atomically, a finished run is
written over only when asked, errors in the configuration or the data stop a command before
it creates anything, and evaluations land beside the checkpoint they evaluate."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from dna_video.training.cli import main
from dna_video.runs.folders import claim_version_folder, run_files
from dna_video.training.runs import RestoreError, claim_run_folder
from run_helpers import short_run_args

REPO = Path(__file__).resolve().parents[1]


def quick_args(root, log_dir, *extra):
    """One epoch of one training batch: a run that writes every run file."""
    return short_run_args(root, log_dir, "--trainer.max_epochs=1", "--trainer.limit_train_batches=1", *extra)


@pytest.mark.slow
@pytest.mark.forks
def test_two_fits_started_together_get_a_folder_each(synthetic_root, tmp_path, forked_cli):
    # Two processes forked at once (run_helpers.forked_cli: no interpreter start-up, so they
    # reach the folder claim closer together than two new interpreters would).
    runs = [forked_cli(["fit", *quick_args(synthetic_root, tmp_path)], tmp_path / f"output_{i}.txt") for i in range(2)]
    for i, process in enumerate(runs):
        process.join(timeout=600)
        assert process.exitcode == 0, (tmp_path / f"output_{i}.txt").read_text()[-3000:]
    folders = sorted(p.name for p in (tmp_path / "exp").iterdir())
    assert folders == ["version_0", "version_1"]
    for name in folders:
        run = tmp_path / "exp" / name
        summary = json.loads((run / "summary.json").read_text())
        # Each run's summary names its own checkpoints, and they are there.
        assert Path(summary["fit"]["last_checkpoint"]) == run / "checkpoints" / "last.ckpt"
        assert Path(summary["fit"]["best_checkpoint"]).parent == run / "checkpoints"
        assert (run / "config.yaml").is_file()
    recorded = [json.loads(line)["log_dir"] for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert sorted(recorded) == [str(tmp_path / "exp" / n) for n in folders]


def test_claim_skips_taken_numbers_and_any_folder_a_racing_run_made(tmp_path):
    class Logger:  # the two attributes a folder logger has
        root_dir = str(tmp_path / "exp")
        _version = None

    (tmp_path / "exp" / "version_3").mkdir(parents=True)
    (tmp_path / "exp" / "version_x").mkdir()
    first, second = Logger(), Logger()
    assert claim_run_folder(first) == tmp_path / "exp" / "version_4" and first._version == 4
    assert claim_run_folder(second) == tmp_path / "exp" / "version_5" and second._version == 5


@pytest.mark.parametrize("rival", ["made after the listing", "missing from the listing"])
def test_claim_moves_past_a_folder_the_listing_did_not_show(tmp_path, monkeypatch, rival):
    """A deterministic race: another run holds version_2 and version_3, but the claim's listing
    of the folder does not show them (made between the listing and the claim, or a listing that
    lags, as on a network file system). The claim must take version_4, a folder nobody had,
    and never hand back one that exists. (Two fits started together rarely reach this.)"""
    root = tmp_path / "exp"
    for n in (0, 1):
        (root / f"version_{n}").mkdir(parents=True)
    (root / "version_1" / "config.yaml").write_text("the run of version_1\n")
    rivals = [root / "version_2", root / "version_3"]
    real_glob = Path.glob

    def stale_glob(self, pattern, *args, **kwargs):
        if rival == "missing from the listing":
            for folder in rivals:
                folder.mkdir(exist_ok=True)
        listed = list(real_glob(self, pattern, *args, **kwargs))
        for folder in rivals:
            folder.mkdir(exist_ok=True)
            (folder / "config.yaml").write_text(f"the run of {folder.name}\n")
        return iter([p for p in listed if p not in rivals])  # what this run saw: versions 0 and 1

    monkeypatch.setattr(Path, "glob", stale_glob)
    existing = {p.name for p in root.iterdir()}
    folder, number = claim_version_folder(root)
    assert (folder, number) == (root / "version_4", 4)
    assert folder.name not in existing and folder.is_dir() and not list(folder.iterdir())
    for other in rivals:  # the other runs' folders are theirs, untouched
        assert (other / "config.yaml").read_text() == f"the run of {other.name}\n"

    class Logger:  # the two attributes a folder logger has
        root_dir = str(root)
        _version = None

    logger = Logger()  # the listing still lags: the logger gets the next folder nobody had
    assert claim_run_folder(logger) == root / "version_5" and logger._version == 5


@pytest.fixture(scope="session")
def finished_run(synthetic_root, tmp_path_factory):
    """A finished run (version_0 of experiment `exp`) and the bytes of its files."""
    logs = tmp_path_factory.mktemp("finished")
    main(["fit", *quick_args(synthetic_root, logs)])
    run = logs / "exp" / "version_0"
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert run / "checkpoints" / "last.ckpt" in files and run / "summary.json" in files
    return logs, run, files


def _unchanged(files):
    for path, content in files.items():
        assert path.read_bytes() == content, f"{path} changed"


@pytest.mark.slow
def test_fit_onto_a_finished_run_needs_overwrite(finished_run, synthetic_root):
    logs, run, files = finished_run
    with pytest.raises(RestoreError, match=r"run folder .*version_0 already holds a run \(summary.json, config.yaml"):
        main(["fit", *quick_args(synthetic_root, logs, "--trainer.logger.init_args.version=0")])
    _unchanged(files)
    assert sorted(p.name for p in (logs / "exp").iterdir()) == ["version_0"]


@pytest.mark.slow
def test_overwrite_writes_over_the_run(finished_run, synthetic_root, tmp_path):
    logs, run, files = finished_run
    copy = tmp_path / "copy"
    import shutil
    shutil.copytree(logs, copy)
    main(["fit", *quick_args(synthetic_root, copy, "--trainer.logger.init_args.version=0", "--overwrite=true",
                             "--trainer.max_epochs=2")])
    last = torch.load(copy / "exp" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["epoch"] == 1  # the new run's two epochs, not the first run's one


@pytest.mark.parametrize("bad, message", [
    ("--data.init_args.batch_size=0", "data.init_args.batch_size is 0: give 1 or more"),
    ("--data.init_args.num_workers=-1", "data.init_args.num_workers is -1"),
])
def test_a_bad_data_option_stops_before_any_run_folder(bad, message, synthetic_root, tmp_path):
    with pytest.raises(ValueError, match=message):
        main(["fit", *quick_args(synthetic_root, tmp_path / "logs", bad)])
    assert not (tmp_path / "logs").exists()


def test_a_missing_dataset_root_stops_before_any_run_folder(tmp_path):
    args = ["fit", "--config", "configs/toyota_cs.yaml", f"--data.init_args.root={tmp_path / 'nowhere'}",
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.init_args.save_dir={tmp_path / 'logs'}", "--trainer.enable_progress_bar=false"]
    with pytest.raises(FileNotFoundError, match="root .*nowhere is not a folder: set data.init_args.root"):
        main(args)
    assert not (tmp_path / "logs").exists()


def test_a_mistyped_synthetic_root_is_announced_before_anything_is_generated(synthetic_root, tmp_path, caplog):
    from dna_video.data.synthetic import SyntheticSmarthome

    module = SyntheticSmarthome(root=str(tmp_path / "typo"), videos_per_subject_class=1, num_workers=0)
    with caplog.at_level(logging.WARNING, logger="dna_video"):
        module.check_inputs("fit")
    assert "typo does not exist: generating the synthetic dataset there (90 videos)" in caplog.text
    assert not (tmp_path / "typo").exists()  # only announced: prepare_data generates
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "thesis.tex").write_text("mine")
    with pytest.raises(FileExistsError, match="other exists but holds no synthetic.json"):
        SyntheticSmarthome(root=str(tmp_path / "other"), num_workers=0).check_inputs("fit")
    # The dataset there: the splits are built (and kept for setup).
    ready = SyntheticSmarthome(root=str(synthetic_root), videos_per_subject_class=1, num_workers=0)
    ready.check_inputs("fit")
    assert set(ready.datasets) == {"train", "val"}


@pytest.mark.slow
def test_testing_another_experiments_checkpoint_writes_beside_it(finished_run, synthetic_root, tmp_path):
    logs, run, files = finished_run
    other = tmp_path / "other_logs"
    args = quick_args(synthetic_root, other, "--trainer.logger.init_args.name=another",
                      f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    main(["test", *args])
    main(["test", *args])  # again: the same folder, replaced
    assert not other.exists()  # no version_N of the command's own experiment
    report = json.loads((run / "test" / "test_metrics.json").read_text())
    assert report["checkpoint"] == str(run / "checkpoints" / "last.ckpt")
    _unchanged({p: c for p, c in files.items() if "test" not in p.relative_to(run).parts})
    assert sorted(p.name for p in (logs / "exp").iterdir()) == ["version_0"]


def test_run_files_lists_what_marks_a_run(tmp_path):
    assert run_files(tmp_path) == []
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best-01.ckpt").write_bytes(b"x")
    (tmp_path / "summary.json").write_text("{}")
    assert run_files(tmp_path) == ["summary.json", "checkpoints/best-01.ckpt"]


@pytest.mark.slow
def test_options_that_clash_with_the_checkpoint_say_where_they_were_set(finished_run, synthetic_root, tmp_path):
    logs, run, files = finished_run
    last = run / "checkpoints" / "last.ckpt"
    mine = tmp_path / "mine.yaml"
    mine.write_text("model:\n  network:\n    attention: softmax\n")
    with pytest.raises(RestoreError) as error:
        main(["validate", *quick_args(synthetic_root, logs, "--config", str(mine), "--data.init_args.num_frames=8",
                                      f"--ckpt_path={last}")])
    text = str(error.value)
    assert f"model.network.attention: given 'softmax' (set in {mine}), the checkpoint has 'dna'" in text
    assert "model.num_frames: given 8 (from data.init_args.num_frames, set on the command line), " \
           "the checkpoint has 4" in text
    # The quickstart config sets neither: validating with it runs the checkpoint's network.
    cli = main(["validate", *quick_args(synthetic_root, logs, f"--ckpt_path={last}")])
    assert cli.model.hparams.network["attention"] == "dna"
