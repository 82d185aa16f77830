"""`python -m experiments.paper` end to end on the generated Toyota and NTU trees: tiny model,
2 seeds, the table checked against each run's own logged test metrics and checkpoints."""

import csv
import statistics
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from experiments import paper

TINY = ["--", "--model.network.arch", "tiny", "--model.network.embed_dim", "32", "--model.network.depth", "1",
        "--data.init_args.num_frames", "2", "--data.init_args.sampling_rate", "4",
        "--data.init_args.train_short_side", "[32,40]", "--data.init_args.crop_size", "32",
        "--data.init_args.num_workers", "0", "--data.init_args.batch_size", "4",
        "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger"]


def _in_process(command, cwd=None):
    """The runner's ``python cli.py fit ...`` in this process, without the start-up cost of 4
    interpreters (the denoising runner's test runs its commands as real processes)."""
    from dna_video.training.cli import main

    assert Path(command[1]).name == "cli.py" and command[2] == "fit"
    main(command[2:])
    return subprocess.CompletedProcess(command, 0)


@pytest.mark.slow
@pytest.mark.parametrize("dataset, protocol, tree", [("toyota_smarthome", "cs", "smarthome_tree"),
                                                      ("ntu60", "cs", "ntu_tree")])
def test_paper_runner_fits_tests_and_tabulates_both_attentions(dataset, protocol, tree, request, tmp_path, capsys,
                                                               monkeypatch):
    root, _ = request.getfixturevalue(tree)
    monkeypatch.setattr(paper, "subprocess", SimpleNamespace(run=_in_process))
    argv = ["--dataset", dataset, "--protocol", protocol, "--root", str(root), "--seeds", "2",
            "--out", str(tmp_path), *TINY]
    assert paper.main(argv) == 0
    experiment = tmp_path / f"{dataset}_{protocol}"
    with open(experiment / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["attention"], r["seed"]) for r in rows) == [("dna", "0"), ("dna", "1"), ("softmax", "0"), ("softmax", "1")]
    for row in rows:
        run = experiment / f"{row['attention']}_seed{row['seed']}" / "version_0"
        with open(run / "metrics.csv") as f:
            logged = next(r for r in csv.DictReader(f) if r.get("test/mca"))
        assert float(row["mca"]) == float(logged["test/mca"]) and float(row["top1"]) == float(logged["test/top1"])
        state = torch.load(row["checkpoint"], weights_only=False)
        assert state["hyper_parameters"]["network"]["attention"] == row["attention"]
        params = sum(v.numel() for k, v in state["state_dict"].items() if k.startswith("net."))
        assert float(row["params_m"]) == pytest.approx(params / 1e6)
        assert int(row["views_per_video"]) == 3  # the recipe's 1 clip x 3 crops
    # The paired delta line: DnA - softmax per seed, mean over the 2 seeds.
    by = {(r["attention"], r["seed"]): float(r["mca"]) for r in rows}
    deltas = [100 * (by["dna", s] - by["softmax", s]) for s in ("0", "1")]
    text = (experiment / "results.md").read_text()
    assert f"mean per-class accuracy {statistics.mean(deltas):.2f} +/- {statistics.stdev(deltas):.2f} points" in text
    assert "the paper: +1.3" in text if dataset == "toyota_smarthome" else "the paper: +1.2" in text
    dna_gflops = float(next(r for r in rows if r["attention"] == "dna")["gflops_per_view"])
    softmax_gflops = float(next(r for r in rows if r["attention"] == "softmax")["gflops_per_view"])
    assert dna_gflops > softmax_gflops > 0

    # Run again: every run is finished, so nothing trains and the table is the same.
    capsys.readouterr()
    assert paper.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("[finished, skipped]") == 4 and "== " not in out
    assert (experiment / "results.md").read_text() == text


def test_dry_run_prints_the_plan_for_a_root_that_does_not_exist_yet(tmp_path, capsys):
    root = tmp_path / "not_mounted"
    assert paper.main(["--dataset", "toyota_smarthome", "--protocol", "cs", "--root", str(root),
                       "--out", str(tmp_path / "paper"), "--seeds", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 runs (softmax, dna x 2 seeds):" in out and out.count(f"--data.init_args.root {root}") == 4
    assert not root.exists() and not (tmp_path / "paper").exists()  # a dry run writes nothing
    with pytest.raises(SystemExit):  # a real run still needs the folder
        paper.main(["--dataset", "toyota_smarthome", "--protocol", "cs", "--root", str(root),
                    "--out", str(tmp_path / "paper")])
