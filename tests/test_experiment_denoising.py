"""`python -m experiments.denoising`: the design (cells, comparisons), the schedule (a free
worker takes a cell whose start has finished), the measures against a hand count, the quick
grid end to end (real videos, real Lightning fits forked from a process that imported the
toolkit once) with `--jobs 2`, `--only` rerunning a cell alone with its command as a plain
process and finding its row again, and the README's report against `--table` on the committed
results."""

import csv
import json
import subprocess
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
    cues = torch.tensor([0, 2, 2, 2, 1, 3])  # conflicting: videos 1, 3, 4, 5
    predicted = torch.tensor([0, 2, 2, 3, 1, 1])
    probs = torch.nn.functional.one_hot(predicted, 5).float()
    metrics = set_metrics(probs, labels, cues)
    assert metrics["top1"] == pytest.approx(3 / 6)  # videos 0, 2, 3
    assert metrics["conflicting"] == 4
    assert metrics["conflict_top1"] == pytest.approx(1 / 4)  # video 3
    assert metrics["cue_follow"] == pytest.approx(2 / 4)  # videos 1 (cue 2) and 4 (cue 1)
    # The distractor performs class cue + 1 mod 5: 1, 3, 3, 3, 2, 4 (video 3's is its label).
    assert metrics["distractor_is_label"] == 1
    # true: 0, 2, 3; cue: 1, 4; distractor: none (video 5 predicts 1, its distractor's class is 4)
    assert metrics["outcomes"] == {"true": 3, "cue": 2, "distractor": 0, "other": 1}
    assert metrics["distractor_confusion"] == 0.0 and metrics["predicted"] == "022311"
    predicted = torch.tensor([1, 3, 2, 3, 2, 4])  # 0, 1, 4, 5 predict the distractor's class; 3 it and the label
    metrics = set_metrics(torch.nn.functional.one_hot(predicted, 5).float(), labels, cues)
    assert metrics["outcomes"] == {"true": 2, "cue": 0, "distractor": 4, "other": 0}
    assert metrics["distractor_confusion"] == pytest.approx(4 / 6)


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


def _labels(folder: Path) -> dict[str, int]:
    """File name -> label, read from the name (``<class>_p<subject>_r.._v.._c...mp4``) and the
    folder's manifest (the class list in label order): not through the dataset's code."""
    import re

    classes = json.loads((folder / "distractors.json").read_text())["classes"]
    return {path.name: classes.index(re.fullmatch(r"(.+)_p\d+_r\d+_v\d+_c\d+\.mp4", path.name).group(1))
            for path in folder.glob("*.mp4")}


def _recount_from_the_data(row: dict, sets: dict, data: Path) -> None:
    """The distractor confusion and the other shares of a run, counted again from its record's
    per-video predictions and the test folders' files (names, manifest, cues.json), by hand."""
    import hashlib

    for name in ("in_distribution", "shifted", "shifted_negative_off"):
        if name not in sets:
            assert name == "shifted_negative_off" and row["variant"] == "softmax"
            continue
        folder = data / f"test_{name.removesuffix('_negative_off')}"
        labels, cues = _labels(folder), json.loads((folder / "cues.json").read_text())
        names = sorted(labels)  # the records' order, checked by its digest
        assert hashlib.sha256("\n".join(names).encode()).hexdigest() == sets[name.removesuffix("_negative_off")]["order_sha256"]
        predicted = [int(c) for c in sets[name]["predicted"]]
        assert len(predicted) == len(names)
        counts = {"true": 0, "cue": 0, "distractor": 0, "other": 0}
        for video, guess in zip(names, predicted):
            label, cue = labels[video], cues[video]
            if guess == label:
                counts["true"] += 1
            elif guess == cue:
                counts["cue"] += 1
            elif guess == (cue + 1) % 5:  # the distractor performs the motion of the class after the cue's
                counts["distractor"] += 1
            else:
                counts["other"] += 1
        assert sets[name]["outcomes"] == counts, name
        column = "shifted_distractor_confusion_negative_off" if name.endswith("off") else f"{name}_distractor_confusion"
        assert float(row[column]) == pytest.approx(counts["distractor"] / len(names), abs=1e-6)
        if not name.endswith("off"):
            assert float(row[f"{name}_top1"]) == pytest.approx(counts["true"] / len(names), abs=1e-6)


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
            _recount_from_the_data(row, sets, out / "data")
    assert (out / "denoising_differences.png").read_bytes()[:4] == b"\x89PNG"
    # The report's count of the held-out sets' cues equals the files' own.
    for name, facts in report.data_facts(plan, quick=True).items():
        cues = json.loads((out / "data" / f"test_{name}" / "cues.json").read_text())
        labels = _labels(out / "data" / f"test_{name}")
        assert facts["videos"] == len(cues) == len(labels)
        assert facts["conflicting"] == sum(cues[v] != labels[v] for v in cues)
        assert facts["distractor_is_label"] == sum((cues[v] + 1) % 5 == labels[v] for v in cues)

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


def _committed_rows() -> list[dict]:
    results = design.RESULTS / "denoising.csv"
    if not results.is_file():
        pytest.skip("no committed results yet")
    return report.read_csv(results)


def test_readme_and_docs_report_the_tables_of_the_committed_results():
    """README and docs hold what `--update-docs` writes from the committed CSV and plan (the
    generated parts of the text: tables, verdict, the data's cue shares)."""
    from experiments.denoising.docs import sections

    rows = _committed_rows()
    plan = design.load_plan()
    for path, blocks in sections(rows, plan).items():
        text = (REPO / path).read_text()
        for marker, block in blocks.items():
            assert f"<!-- {marker} -->\n{block}\n<!-- end {marker} -->" in text, (path, marker)


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def _plan_at(commit: str) -> dict:
    shown = _git("show", f"{commit}:experiments/denoising_plan.yaml")
    assert shown.returncode == 0, f"{commit}: the recorded commit is not in this clone, or has no plan " \
                                  f"({shown.stderr.strip()}); a row that cannot be traced fails"
    return yaml.safe_load(shown.stdout)


def test_the_plan_was_committed_before_the_primary_runs():
    """Every primary row was run from a commit that already holds the plan's n (a commit missing
    from the clone fails: the rows' provenance must be traceable)."""
    primary = [r for r in _committed_rows() if r["group"] == "primary"]
    n = design.load_plan()["primary"]["pairs"]
    for row in primary:
        assert not row["commit"].endswith("+dirty"), row
        assert _plan_at(row["commit"])["primary"]["pairs"] == n, row


def _confirmatory_plan_commit() -> str:
    """The commit that set the plan's confirmatory section as it is now: the oldest commit of
    the plan file's history from which the section has stayed unchanged."""
    now = design.load_plan()["confirmatory"]
    history = _git("log", "--format=%H", "--", "experiments/denoising_plan.yaml").stdout.split()
    found = None
    for commit in history:  # newest first
        if (_plan_at(commit).get("confirmatory") or {}) != now:
            break
        found = commit
    assert found is not None, "the plan's confirmatory section is not committed"
    return found


def test_the_confirmatory_plan_was_committed_alone_before_its_runs():
    """The confirmatory question's plan (metric, test, n, seeds, stopping rule) was committed
    on its own, and that commit is an ancestor of the commit of every confirmatory row (fails,
    never skips, when a row's commit is missing from the clone)."""
    plan = design.load_plan()
    spec = plan["confirmatory"]
    assert spec["pairs"] and spec["metric"] == design.CONFUSION and spec["test"].startswith("two-sided paired t-test")
    commit = _confirmatory_plan_commit()
    changed = _git("show", "--name-only", "--format=", commit).stdout.split()
    assert changed == ["experiments/denoising_plan.yaml"], (commit, changed)
    # Seeds of its own: no other cell of the grid has them.
    confirm = design.confirmatory_cells(plan)
    others = {c.seed for c in design.cells(plan) + design.cells(plan, calibration=True) if c.group != "confirm"}
    assert len(confirm) == 2 * spec["pairs"] and not {c.seed for c in confirm} & others
    rows = [r for r in _committed_rows() if r["group"] == "confirm"]
    for row in rows:
        assert not row["commit"].endswith("+dirty"), row
        assert _git("cat-file", "-e", f"{row['commit']}^{{commit}}").returncode == 0, \
            f"{row['commit']}: the commit of {report.cell_name(row)} is not in this clone"
        ancestor = _git("merge-base", "--is-ancestor", commit, row["commit"])
        assert ancestor.returncode == 0, f"{report.cell_name(row)} ran at {row['commit'][:12]}, not after the plan {commit[:12]}"
    assert {report.cell_name(r) for r in rows} <= {c.name for c in confirm}


def test_every_committed_row_has_a_complete_record():
    """Each CSV row has its record beside it, with the row itself and the same provenance fields
    as every other (commit, command, versions, threads, data_sha256, cpu_capability...)."""
    rows = _committed_rows()
    folder = design.RESULTS / "denoising"
    keys = None
    for row in rows:
        record = json.loads((folder / f"{report.cell_name(row)}.json").read_text())
        assert report.csv_row(record["row"]) == row
        provenance = record["provenance"]
        keys = keys or set(provenance)
        assert set(provenance) == keys, report.cell_name(row)
        assert provenance["data_sha256"] and provenance["cpu_capability"] == row["cpu_capability"], row
        assert provenance["torch_threads"] == 1 and provenance["omp_num_threads"] == "1" and provenance["versions"]["torch"]
        assert provenance["command"].split()[1:3] == ["cli.py", "fit"] and not provenance["dirty"]
        if row["task"] == "target":
            assert set(record["details"]["sets"]) >= {"in_distribution", "shifted"}
    assert {p.relative_to(folder).as_posix().removesuffix(".json") for p in folder.rglob("*.json")} == \
           {report.cell_name(r) for r in rows}


def _row(group: str, variant: str, seed: int, start: str = "-", **values) -> dict:
    return {"group": group, "variant": variant, "dna_init": "-", "seed": str(seed), "task": "target", "start": start,
            **{k: str(v) for k, v in values.items()}}


def test_pairs_that_share_a_start_count_as_one_unit():
    """5 DnA fine-tunes from 3 pretrainings against softmax from one: 3 units (the means of the
    pairs of each start), not 5 pairs; pairs that share one start throughout stay pairs."""
    plan = design.load_plan()
    a = [0.30, 0.34, 0.40, 0.28, 0.36]
    b = [0.35, 0.31, 0.39, 0.33, 0.30]
    rows = [_row("dna_pretrained", "dna", s, f"pretrain/dna/seed{s % 3}", shifted_top1=a[s]) for s in range(5)]
    rows += [_row("primary", "softmax", s, "pretrain/softmax/seed0", shifted_top1=b[s]) for s in range(5)]
    item = next(i for i in report.comparison_rows(rows, plan) if i["comparison"].name.startswith("DnA-pretrained DnA - "
                                                                                                "softmax-pretrained softmax"))
    assert item["clustered"] and item["units"] == 3 and item["starts"] == [3, 1]
    # by hand: starts 0 (seeds 0, 3), 1 (1, 4), 2 (2): differences -0.05, +0.03 | +0.03, +0.06 | +0.01
    units = [(-0.05 - 0.05) / 2, (0.03 + 0.06) / 2, 0.01]
    assert item["result"].n == 3 and item["result"].mean == pytest.approx(sum(units) / 3)
    line = next(x for x in report.comparison_table(rows, plan).splitlines() if "DnA-pretrained DnA - softmax-pre" in x)
    assert "| 5 (3 starts, one unit each) | 3 / 1 |" in line


def test_the_verdict_answers_the_confirmatory_question_only_with_all_its_pairs():
    plan = design.load_plan()
    spec = plan["confirmatory"]
    if not spec.get("pairs"):
        spec = dict(spec, pairs=4)
        plan = dict(plan, confirmatory=spec)
    first, n = spec["first_seed"], spec["pairs"]
    rows = [_row("confirm", "softmax", first + i, shifted_distractor_confusion=0.40 + 0.01 * (i % 3),
                 shifted_top1=0.35, shifted_cue_follow=0.15) for i in range(n)]
    rows += [_row("confirm", spec["variant"], first + i, shifted_distractor_confusion=0.30 + 0.02 * (i % 2),
                  shifted_top1=0.35, shifted_cue_follow=0.15) for i in range(n)]
    text = " ".join(report.verdict(rows, plan).split())
    assert "DnA lowers it" in text and f"{n} pairs of their own seeds" in text
    assert "has" not in text.split("confirmatory question")[1][:40]
    partial = " ".join(report.verdict(rows[:-1], plan).split())
    assert f"has {n - 1} of its {n} planned pairs: no test is made" in partial and "lowers" not in partial
    # The table shows nothing of the metric either until the last pair is in (no interim look).
    line = next(x for x in report.confusion_table(rows[:-1], plan).splitlines() if "**confirmatory**" in x)
    assert line.endswith(f"| {n - 1} of {n} (incomplete: not tested) | - / - | - | - | - | - | - | - |"), line
    line = next(x for x in report.confusion_table(rows, plan).splitlines() if "**confirmatory**" in x)
    assert f"| {n} | - / - | 31.0 |" in line and "incomplete" not in line
    # Nor do the per-arm tables: the confirmatory arms appear with their last pair.
    for complete, shown in ((rows, True), (rows[:-1], False)):
        assert ("| confirm | softmax |" in report.outcomes_table(complete, plan)) == shown
        assert ("| confirm | softmax |" in report.table(complete, plan)) == shown


def test_the_primary_is_tested_only_with_all_its_pairs():
    """The primary comparison is preregistered with its n too: a grid stopped before its last
    pair shows the pairs it has and no interval, p or MDE, in the table and in the verdict."""
    plan = design.load_plan()
    n = plan["primary"]["pairs"]
    init = plan["primary"]["dna_init"]
    start = "pretrain/softmax/seed0"
    rows = [_row("primary", "softmax", s, start, shifted_top1=0.40 + 0.01 * (s % 3)) for s in range(n)]
    rows += [{**_row("primary", "dna", s, start, shifted_top1=0.38 + 0.02 * (s % 2)), "dna_init": init}
             for s in range(n)]
    partial = rows[:n - 1] + rows[n:]  # the softmax run of the last pair missing
    line = next(x for x in report.key_table(partial, plan).splitlines() if "**primary**" in x)
    assert line.endswith(f"| {n - 1} of {n} (incomplete: not tested) | 1 / 1 | - | - | - | - | - | - |"), line
    text = " ".join(report.verdict(partial, plan).split())
    assert f"has {n - 1} of its {n} planned pairs: no test is made" in text and "On it" not in text
    line = next(x for x in report.key_table(rows, plan).splitlines() if "**primary**" in x)
    assert f"| {n} | 1 / 1 |" in line and "incomplete" not in line
    assert "On it, DnA minus softmax on the shifted set is" in " ".join(report.verdict(rows, plan).split())


def test_the_reading_states_the_pretraining_bar_and_the_exploratory_intervals():
    """docs/denoising.md's reading, from rows: the pretraining's bar failed (fine-tuned softmax
    below from-scratch softmax), the DnA-pretrained arm's 5 fine-tunes from 3 pretrainings as 3
    units, and no preregistered comparison among the exploratory ones."""
    plan = design.load_plan()
    rows = [_row("primary", "softmax", s, "pretrain/softmax/seed0", in_distribution_top1=0.55 + 0.01 * s,
                 shifted_top1=0.35 + 0.01 * (s % 2)) for s in range(5)]
    rows += [_row("scratch", "softmax", s, in_distribution_top1=0.75 - 0.02 * (s % 3)) for s in range(5)]
    rows += [_row("dna_pretrained", "dna", s, f"pretrain/dna/seed{s % 3}", shifted_top1=0.30 + 0.02 * (s % 3))
             for s in range(5)]
    rows += [{"group": "pretrain", "variant": "softmax", "dna_init": "-", "seed": "0", "task": "source", "start": "-",
              "source_top1": "0.781", "commit": "abcdef0" + "0" * 33}]
    text = " ".join(report.reading(rows, plan).split())
    # by hand: in distribution 0.55..0.59 against 0.75, 0.73, 0.71, 0.75, 0.73: differences sum to -0.82
    assert "Fine-tuned softmax minus from-scratch softmax in distribution: -16.4 [" in text and "below the bar" in text
    assert "softmax seed 0 78.1%" in text and "from the commits abcdef0" in text
    assert "DnA-pretrained DnA - softmax-pretrained softmax (shifted top-1) " in text and ", 3 units" in text
    assert "**primary**" not in text and "confirmatory" not in text


def test_an_interrupted_fit_starts_over_and_a_fit_is_measured_only_at_its_commit(tmp_path, monkeypatch):
    """Resuming a stretch: a fit that died (folder, checkpoints, no fit.done) is run again from
    nothing, never continued from its last.ckpt; a finished fit of another commit is not
    measured here (its row would hold one commit for code of two)."""
    from experiments.denoising import measure, runs
    from experiments.reproducible import tree_state

    plan = design.load_plan()
    layout = runs.Layout(tmp_path, plan, quick=True)
    cell = design.Cell("scratch", "softmax", 0)
    folder = cell.folder(layout.runs)
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_text("from the interrupted fit")
    commands = []

    class Launcher:
        def run(self, command, cwd, log):
            commands.append(command)
            assert not folder.exists()  # what the interrupted fit left is gone
            (folder / "checkpoints").mkdir(parents=True)
            (folder / "checkpoints" / "last.ckpt").write_text("new")
            return 0

    monkeypatch.setattr(measure, "measure", lambda cell, layout: {"row": {"group": cell.group}, "details": {}})
    assert runs.run_cell(cell, layout, REPO, Launcher()) is None
    assert len(commands) == 1 and "--ckpt_path" not in commands[0] and "--overwrite" not in commands[0]
    assert (folder / "fit.done").is_file() and json.loads((folder / "cell.json").read_text())["row"]["commit"]
    # A finished cell is not fitted again; one fitted at another commit is refused, named.
    assert runs.run_cell(cell, layout, REPO, Launcher()) is None and len(commands) == 1
    provenance = json.loads((folder / "provenance.json").read_text())
    assert provenance["commit"] == tree_state(REPO).commit
    provenance["commit"] = "0" * 40
    (folder / "provenance.json").write_text(json.dumps(provenance))
    (folder / "cell.json").unlink()
    error = runs.run_cell(cell, layout, REPO, Launcher())
    assert error.startswith("fitted at 000000000000 but measured now at") and "--at 000000000000" in error
    assert not (folder / "cell.json").exists() and len(commands) == 1


def test_update_docs_rewrites_only_the_generated_blocks(tmp_path, monkeypatch):
    from experiments.denoising import docs

    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("intro\n<!-- a -->\nold\n<!-- end a -->\noutro\n")
    (tmp_path / "docs" / "denoising.md").write_text("<!-- b -->\n<!-- end b -->\n")
    monkeypatch.setattr(docs, "sections", lambda rows, plan: {"README.md": {"a": "new\ntext"},
                                                              "docs/denoising.md": {"b": "x"}})
    assert docs.update([], {}, tmp_path) == [tmp_path / "README.md", tmp_path / "docs" / "denoising.md"]
    assert (tmp_path / "README.md").read_text() == "intro\n<!-- a -->\nnew\ntext\n<!-- end a -->\noutro\n"
    assert docs.update([], {}, tmp_path) == []  # nothing left to change
    (tmp_path / "README.md").write_text("no markers\n")
    with pytest.raises(ValueError, match="README.md: no '<!-- a -->'"):
        docs.update([], {}, tmp_path)


def test_the_sensitivity_table_says_which_runs_repeat_the_first():
    from experiments.denoising import sensitivity

    def row(change, what, top1, weights, data="d1", capability="AVX512", threads="1"):
        return {"change": change, "what": what, "in_distribution_top1": "0.5", "shifted_top1": str(top1),
                "shifted_distractor_confusion": "0.25", "weights_sha256": weights, "train_data_sha256": data,
                "cpu_capability_in_fit": capability, "threads_in_fit": threads, "cpu": "Xeon", "commit": "abc" * 14,
                "same_weights_as_none": "yes" if weights == "w" else "no"}

    rows = [row("none", "none", 0.4, "w"), row("kernels_avx2", "torch's kernel path AVX2", 0.3125, "v", capability="AVX2"),
            row("rerendered", "the training videos rendered again", 0.4, "w")]
    text = sensitivity.table(rows, "scratch/dna/seed0")
    assert "| torch's kernel path AVX2 | AVX2, 1 | 50.0 | 31.2 | 25.0 | no |" in text
    assert "| none | AVX512, 1 | 50.0 | 40.0 | 25.0 | yes |" in text
    assert "byte for byte the first's" in text and "`scratch/dna/seed0`" in text
    assert "NOT the first's bytes" in sensitivity.table(rows[:2] + [row("rerendered", "again", 0.4, "w", data="d2")])


def test_an_independent_recount_agrees_with_the_published_tables(capsys):
    """experiments/denoising_recount.py (its own arithmetic on the CSV) finds every number of the
    README's confusion comparisons and the docs' per-arm outcomes as printed."""
    _committed_rows()
    import importlib.util

    spec = importlib.util.spec_from_file_location("recount", REPO / "experiments" / "denoising_recount.py")
    recount = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recount)
    assert recount.main([]) == 0, capsys.readouterr().out
    assert " 0 disagree" in capsys.readouterr().out


def test_the_pilot_report_sizes_the_confirmatory_question_from_the_scratch_pairs():
    """n = the smallest number of pairs from min_pairs to max_pairs whose MDE at the plan's
    power, from the sd of the scratch pairs' differences, is at most 3 points (scipy's t by hand)."""
    import math

    from scipy.stats import t

    plan = design.load_plan()
    spec = plan["confirmatory"]
    diffs = [-0.10, -0.02, 0.03, -0.06, 0.01]  # dna - softmax over 5 pairs
    rows = [_row("scratch", "softmax", s, shifted_distractor_confusion=0.4) for s in range(5)]
    rows += [_row("scratch", spec["variant"], s, shifted_distractor_confusion=0.4 + d) for s, d in enumerate(diffs)]
    mean = sum(diffs) / 5
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 4)
    n = next(k for k in range(spec["min_pairs"], spec["max_pairs"] + 1)
             if (t.ppf(1 - spec["alpha"] / 2, k - 1) + t.ppf(spec["power"], k - 1)) * sd / math.sqrt(k) <= spec["target_mde"])
    text = report.pilot_report(rows, plan)
    assert f"confirmatory pilot (group scratch, shifted_distractor_confusion): 5 pairs, difference {100 * mean:+.1f}" in text
    assert f"confirmatory pairs: {n}  (the smallest n >= {spec['min_pairs']}" in text
