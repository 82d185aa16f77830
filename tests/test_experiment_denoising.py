"""`python -m experiments.denoising --quick` end to end (real videos, real Lightning fits, the
measuring processes), the CSV checked against each run's own logged test result, resuming,
and the README's table against `--table` on the committed results."""

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml

from experiments import denoising

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_grid_end_to_end_then_resumes(tmp_path, capsys):
    out = tmp_path / "dn"
    assert denoising.main(["--quick", "--out", str(out), "--jobs", "2"]) == 0
    with open(out / "denoising.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["arm"], r["variant"], r["level"], r["dna_init"]) for r in rows) == [
        ("finetune", "dna", "confusing", "scaled_copy"), ("finetune", "softmax", "confusing", "-"),
        ("main", "dna", "confusing", "-"), ("main", "dna", "none", "-"),
        ("main", "softmax", "confusing", "-"), ("main", "softmax", "none", "-"),
    ]
    for row in rows:
        cell = denoising.Cell(row["arm"], row["variant"], row["level"], int(row["seed"]), row["dna_init"])
        folder = cell.folder(out)
        summary = json.loads((folder / "summary.json").read_text())
        # The measured top-1 is Lightning's own test result for the same checkpoint (1 view per video).
        assert float(row["top1"]) == pytest.approx(summary["test"]["metrics"]["test/top1"], abs=1e-4)
        assert row["checkpoint"] == summary["test"]["checkpoint"]
        for branch in ("positive", "negative"):
            parts = [row[f"mass_{branch}_{region}"] for region in ("actor", "distractors", "background")]
            if branch == "negative" and row["variant"] == "softmax":
                assert parts == ["", "", ""]
                continue
            assert sum(float(p) for p in parts) == pytest.approx(1.0, abs=1e-3)
        if row["variant"] == "softmax":
            assert row["top1_negative_off"] == "" and row["alpha_spatial"] == ""
        else:
            assert len(row["alpha_spatial"].split()) == len(row["alpha_temporal"].split()) == 4  # tiny: 4 blocks
            assert float(row["delta_negative_off"]) == pytest.approx(
                float(row["top1_negative_off"]) - float(row["top1"]), abs=1e-3)
        if row["level"] == "none":
            assert float(row["area_distractors"]) == 0.0 and row["top1_clean"] == row["top1"]
        else:
            assert float(row["area_distractors"]) > 0.0
            assert float(row["delta_clean"]) == pytest.approx(float(row["top1_clean"]) - float(row["top1"]), abs=1e-3)
        config = yaml.safe_load((folder / "config.yaml").read_text())
        if row["arm"] == "finetune":  # starts from the softmax run without distractors, same seed
            start = denoising.Cell("main", "softmax", "none", int(row["seed"])).folder(out)
            start_checkpoint = json.loads((start / "summary.json").read_text())["test"]["checkpoint"]
            assert config["model"]["init_args"]["init"]["source"] == start_checkpoint
        state = torch.load(row["checkpoint"], map_location="cpu", weights_only=False)
        assert state["hyper_parameters"]["network"]["attention"] == row["variant"]
        assert state["datamodule_hyper_parameters"]["level"] == row["level"]
    for name in ("denoising_accuracy.png", "denoising_mass.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"

    # The table from the CSV, and a second run that finds everything finished.
    capsys.readouterr()
    assert denoising.main(["--quick", "--out", str(out), "--table"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == denoising.table(denoising.read_csv(out / "denoising.csv")).strip()
    assert "| confusing | dna | 1 |" in printed and "dna (scaled_copy)" in printed
    assert denoising.main(["--quick", "--out", str(out)]) == 0
    assert "6 runs, 6 finished" in capsys.readouterr().out


def test_readme_table_is_the_table_of_the_committed_results():
    results = denoising.RESULTS / "denoising.csv"
    rows = denoising.read_csv(results)
    runs = {(r["arm"], r["variant"], r["level"], r["seed"], r["dna_init"]) for r in rows}
    assert len(runs) == len(rows) == len(denoising.plan(["main", "finetune"], quick=False))  # the full grid
    assert denoising.table(rows) in (REPO / "README.md").read_text()
