"""`python -m experiments.denoising`: the design (cells, comparisons), the schedule (a free
worker takes a cell whose start has finished), the measures against a hand count, the quick
grid end to end (real videos, real Lightning fits forked from a process that imported the
toolkit once) with `--jobs 2`, `--only` rerunning a cell alone with its command as a plain
process and finding its row again, and the README's report against `--table` on the committed
results."""

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml

from experiments.denoising import design, report
from experiments.denoising.cli import TIMING, main
from experiments.denoising.measure import set_metrics

REPO = Path(__file__).resolve().parents[1]


def test_cells_start_after_their_start_and_the_primary_waits_for_n():
    plan = design.load_plan()
    cells = design.cells(plan)
    names = [c.name for c in cells]
    assert len(names) == len(set(names))
    for i, cell in enumerate(cells):
        if cell.start is not None:
            assert cell.start in cells[:i], cell.name
    groups = {c.group for c in cells}
    if plan["primary"].get("pairs"):
        pairs = plan["primary"]["pairs"]
        assert sum(c.group == "primary" for c in cells) == 2 * pairs >= 2 * plan["primary"]["min_pairs"]
    else:
        assert "primary" not in groups and "finetune_init" not in groups
    pilot = [c for c in cells if c.group == "pilot"]
    assert len(pilot) == 2 * plan["pilot"]["pairs"] and all(c.seed >= plan["pilot"]["first_seed"] for c in pilot)
    assert {c.variant for c in cells if c.group == "scratch"} == {"softmax", "dna", "dna_tied_q"}
    # Every fine-tuning run of the target starts from a source-task model (disjoint classes).
    assert all(c.start.task == "source" for c in cells if c.start is not None)


def test_set_metrics_against_a_hand_count():
    labels = torch.tensor([0, 1, 2, 3, 4, 0])
    cues = torch.tensor([0, 2, 2, 0, 1, 3])  # conflicting: videos 1, 3, 4, 5
    predicted = torch.tensor([0, 2, 2, 3, 1, 1])
    probs = torch.nn.functional.one_hot(predicted, 5).float()
    metrics = set_metrics(probs, labels, cues)
    assert metrics["top1"] == pytest.approx(3 / 6)  # videos 0, 2, 3
    assert metrics["conflicting"] == 4
    assert metrics["conflict_top1"] == pytest.approx(1 / 4)  # video 3
    assert metrics["cue_follow"] == pytest.approx(2 / 4)  # videos 1 (cue 2) and 4 (cue 1)


def test_a_free_worker_takes_a_cell_whose_start_has_finished(tmp_path, monkeypatch):
    """The grid's schedule with the fits replaced by a timed stand-in: no cell starts before its
    start has finished, and with two workers the second runs a cell of its own (the DnA
    pretraining) while the first pretrains softmax, instead of waiting on it."""
    import threading
    import time

    from experiments.denoising import cli
    from experiments.denoising.runs import Layout

    events, lock = [], threading.Lock()

    def fit(cell, layout, code, launcher):
        with lock:
            events.append(("start", cell))
        time.sleep(0.05)
        cell.folder(layout.runs).mkdir(parents=True)
        (cell.folder(layout.runs) / "cell.json").write_text("{}")
        with lock:
            events.append(("end", cell))

    monkeypatch.setattr(cli, "run_cell", fit)
    plan = design.load_plan()
    cells = design.cells(plan, quick=True)
    assert cli._run_grid(cells, Layout(tmp_path, plan, True), tmp_path, 2, None, lambda: None) == []
    assert sorted(c.name for kind, c in events if kind == "end") == sorted(c.name for c in cells)
    for i, (kind, cell) in enumerate(events):
        if kind == "start" and cell.start is not None:
            assert ("end", cell.start) in events[:i], cell.name
    first_end = next(i for i, (kind, _) in enumerate(events) if kind == "end")
    assert {c.name for kind, c in events[:first_end]} == {"pretrain/softmax/seed0", "pretrain/dna/seed0"}


def _rows(path: Path) -> dict[str, dict]:
    with open(path) as f:
        return {report.cell_name(r): r for r in csv.DictReader(f)}


@pytest.mark.slow
def test_quick_grid_end_to_end_jobs_and_only(tmp_path, capfd):
    out = tmp_path / "dn"
    assert main(["--quick", "--out", str(out), "--jobs", "2", "--allow-dirty"]) == 0
    rows = _rows(out / "denoising.csv")
    plan = design.load_plan()
    assert set(rows) == {c.name for c in design.cells(plan, quick=True)}
    for name, row in rows.items():
        cell = next(c for c in design.cells(plan, quick=True) if c.name == name)
        folder = cell.folder(out / "runs")
        provenance = json.loads((folder / "provenance.json").read_text())
        assert provenance["omp_num_threads"] == "1" and row["threads"] == "1"
        # A clean checkout (CI) runs from a worktree of its commit; an edited one as it is, marked.
        assert row["commit"] == provenance["commit"] + ("+dirty" if provenance["dirty"] else "")
        assert provenance["versions"]["torch"] and provenance["cpu_capability"]
        assert provenance["command"].split()[1:3] == ["cli.py", "fit"]
        record = json.loads((out / "denoising" / f"{name}.json").read_text())  # committed beside the CSV
        assert record["config"]["seed_everything"] == cell.seed
        init = record["config"]["model"]["init_args"]
        assert init["init"]["pair_seed"] == cell.seed and record["config"]["data"]["init_args"]["data_seed"] == cell.seed
        if cell.start is not None:  # the last epoch of its start, never a selected one
            assert init["init"]["source"] == str(cell.start.folder(out / "runs") / "checkpoints" / "last.ckpt")
        state = torch.load(folder / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
        assert state["hyper_parameters"]["network"]["attention"] == cell.variant
        if cell.task == "target":
            sets = record["details"]["sets"]
            assert sets["shifted"]["videos"] == sets["in_distribution"]["videos"] == design.QUICK["test_videos"]
            assert sets["shifted"]["conflicting"] == design.QUICK["test_videos"]  # the cue always misleads
            assert float(row["shifted_top1"]) == pytest.approx(sets["shifted"]["top1"], abs=1e-6)
    assert (out / "denoising_differences.png").read_bytes()[:4] == b"\x89PNG"

    # --groups keeps a group and the cells it starts from.
    capfd.readouterr()
    assert main(["--quick", "--out", str(tmp_path / "dn1"), "--groups", "dna_pretrained", "--dry-run"]) == 0
    listed = [line.split("] ")[1] for line in capfd.readouterr().out.splitlines() if line.startswith("  [")]
    assert listed == ["pretrain/dna/seed0", "dna_pretrained/dna/seed0"]

    # --only reruns one cell alone (its start reused) and finds its row again, every column
    # but timing: a row does not depend on the runs beside it (one thread per run whatever --jobs).
    assert main(["--quick", "--out", str(out), "--allow-dirty", "--only", "primary/dna_random/seed1"]) == 0
    assert "primary/dna_random/seed1: reproduced" in capfd.readouterr().out  # capfd: a clean clone prints from its worktree
    rerun = json.loads((out / "reruns" / "runs" / "primary" / "dna_random" / "seed1" / "version_0" / "cell.json").read_text())
    assert {k: v for k, v in report.csv_row(rerun["row"]).items() if k not in TIMING} == \
           {k: v for k, v in rows["primary/dna_random/seed1"].items() if k not in TIMING}

    # The report is --table's, and a finished grid has nothing left to run.
    assert main(["--quick", "--out", str(out), "--table"]) == 0
    assert capfd.readouterr().out.strip() == report.table(report.read_csv(out / "denoising.csv"), plan).strip()
    assert main(["--quick", "--out", str(out), "--dry-run"]) == 0
    assert "7 cells, 7 finished" in capfd.readouterr().out


def test_readme_and_docs_report_the_tables_of_the_committed_results():
    results = design.RESULTS / "denoising.csv"
    if not results.is_file():
        pytest.skip("no committed results yet")
    plan = design.load_plan()
    rows = report.read_csv(results)
    assert report.comparison_table(rows, plan) in (REPO / "README.md").read_text()
    assert report.arms_table(rows) in (REPO / "docs" / "denoising.md").read_text()


def test_the_plan_was_committed_before_the_primary_runs():
    """Every primary row was run from a commit that already holds the plan's n."""
    results = design.RESULTS / "denoising.csv"
    if not results.is_file():
        pytest.skip("no committed results yet")
    import subprocess

    primary = [r for r in report.read_csv(results) if r["group"] == "primary"]
    n = design.load_plan()["primary"]["pairs"]
    for row in primary:
        commit = row["commit"].removesuffix("+dirty")
        plan_then = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:experiments/denoising_plan.yaml"],
                                   capture_output=True, text=True)
        if plan_then.returncode != 0:
            pytest.skip("the recorded commit is not in this clone")
        assert yaml.safe_load(plan_then.stdout)["primary"]["pairs"] == n, row
