"""Does DnA denoise? A paired, powered experiment on synthetic videos with a misleading motion cue.

    python -m experiments.denoising --jobs 2 --hours 2.5   # the grid (resumable) from a worktree of HEAD
    python -m experiments.denoising --only primary/dna_random/seed3   # rerun one cell, compare with its CSV row
    python -m experiments.denoising --sensitivity scratch/dna/seed0   # one cell under environment changes
    python -m experiments.denoising --pilot-report         # n for the plan, from the pilot's pairs
    python -m experiments.denoising --calibrate            # softmax's accuracy on the calibration shift
    python -m experiments.denoising --dry-run              # the plan: every cell, finished or not
    python -m experiments.denoising --table                # the report from experiments/results/denoising.csv
    python -m experiments.denoising --plots                # its figure (experiments/results/denoising_differences.png)
    python -m experiments.denoising --update-docs          # the README's and docs' generated blocks, from the CSV
    python -m experiments.denoising --quick --out /tmp/dn --allow-dirty   # a tiny grid end to end (a test's)

The design (data, cells, comparisons) is :mod:`experiments.denoising.design`; the preregistered
plan (primary comparison, test, alpha, power, n) is ``experiments/denoising_plan.yaml``; what
the runs mean: ``docs/denoising.md``.

Every run is a function of its config, pair seed and environment: the runner refuses a checkout
with uncommitted changes (``--allow-dirty`` runs it as it is, rows marked ``+dirty``; ``--at
REV`` runs that commit whatever the checkout holds), makes a
git worktree of the commit under ``<out>/code/`` and runs everything from there (rendering, fits,
measures), each fit with one thread whatever ``--jobs`` is (its ``cli.py fit`` command, forked from
a process that imported the toolkit once: :class:`~experiments.reproducible.ForkedCli`). Each run folder
holds ``provenance.json`` (commit, command, library versions, threads) and ``cell.json`` (its
measures); the CSV (one row per run) and a record per run (measures, resolved config,
provenance) beside it are rewritten after every run. ``--only CELL`` reruns one cell from a
worktree of the commit its row records, into ``<out>/reruns/``, its fit as a plain process,
and compares the new row with the CSV's (timing columns aside).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from experiments.denoising import design, report
from experiments.denoising.design import REPO, RESULTS, Cell
from experiments.denoising.runs import Layout, render_data, run_cell
from experiments.reproducible import ForkedCli, require_clean, resolve_commit, single_thread_env, tree_state, worktree

#: Columns that differ between two runs of the same cell by design (time, place).
TIMING = ("fit_seconds",)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.denoising", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/denoising", help="where the code worktrees, data and runs go")
    parser.add_argument("--csv", default=None, help="the results CSV (default experiments/results/denoising.csv; "
                                                    "--quick: <out>/denoising.csv)")
    parser.add_argument("--plan", default=str(design.PLAN), help="the plan file (default: the committed one)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (each with one thread)")
    parser.add_argument("--hours", type=float, default=None,
                        help="start no run after this many hours (a stretch; rerun to continue)")
    parser.add_argument("--groups", nargs="+", default=None, help="only the cells of these groups (and their starts)")
    parser.add_argument("--only", default=None, metavar="CELL",
                        help="rerun one cell (group/label/seedN) and compare it with its CSV row")
    parser.add_argument("--sensitivity", default=None, metavar="CELL",
                        help="fit a from-scratch cell again under one change of its environment at a time (threads, "
                             "CPU kernel path, MKL/oneDNN ISA, a second render) and record it beside the CSV "
                             "(denoising_sensitivity.csv): docs/denoising.md's reproducibility table")
    parser.add_argument("--allow-dirty", action="store_true", help="run a checkout with uncommitted changes as it is")
    parser.add_argument("--at", default=None, metavar="REV",
                        help="run the committed code of REV (e.g. HEAD) from its worktree, whatever this checkout "
                             "holds uncommitted")
    parser.add_argument("--quick", action="store_true", help="a tiny grid (small videos, one epoch, few cells)")
    parser.add_argument("--calibrate", action="store_true",
                        help="fit the calibration cell (softmax fine-tuned on the cue regime) and print its accuracy")
    parser.add_argument("--pilot-report", action="store_true", help="print the pilot's spread and the n it implies")
    parser.add_argument("--dry-run", action="store_true", help="print the cells and stop")
    parser.add_argument("--table", action="store_true", help="print the report from the CSV and stop")
    parser.add_argument("--plots", action="store_true", help="draw the report's figure from the CSV and stop")
    parser.add_argument("--update-docs", action="store_true",
                        help="rewrite the generated blocks of README.md and docs/denoising.md from the CSV and stop")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # the worktree's process
    return parser


def _paths(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    out = Path(args.out).resolve()
    csv_path = Path(args.csv).resolve() if args.csv else (out / "denoising.csv" if args.quick else RESULTS / "denoising.csv")
    records = csv_path.parent / csv_path.stem  # one JSON per run beside the CSV
    return out, csv_path, records


def _sensitivity_csv(csv_path: Path) -> Path:
    """The sensitivity record beside the grid's CSV (its JSONs in the folder of its stem)."""
    return csv_path.with_name("denoising_sensitivity.csv")


def _in_worktree(argv: list[str], commit: str, out: Path, csv_path: Path, plan: Path) -> int:
    """Run this command again inside a worktree of ``commit`` (one thread, that code first)."""
    code = worktree(REPO, commit, out / "code")
    command = [sys.executable, "-m", "experiments.denoising", *argv, "--inside", "--out", str(out),
               "--csv", str(csv_path), "--plan", str(plan)]
    print(f"running from {code} (commit {commit[:12]})", flush=True)
    return subprocess.run(command, cwd=code, env=single_thread_env(code)).returncode


def _select(cells: list[Cell], groups: list[str] | None) -> list[Cell]:
    if not groups:
        return cells
    chosen = [c for c in cells if c.group in groups]
    needed = {c.start for c in chosen if c.start is not None}
    return [c for c in cells if c in needed or c in chosen]


def _run_grid(cells: list[Cell], layout: Layout, code: Path, jobs: int, hours: float | None,
              on_done, launcher: ForkedCli | None = None) -> list[str]:
    """Run the cells not finished yet, starts first; returns the failures. Fits run through
    ``launcher`` when given, else each as a process of its own."""
    failures: list[str] = []
    started = time.time()
    deadline = None if hours is None else started + hours * 3600

    def work(cell: Cell) -> None:
        if cell.done(layout.runs):
            return
        if deadline is not None and time.time() > deadline:
            failures.append(f"{cell.name}: not started (the stretch's {hours} h are over; run again to continue)")
            return
        if cell.start is not None and not cell.start.done(layout.runs):
            failures.append(f"{cell.name}: its start {cell.start.name} did not finish")
            return
        error = run_cell(cell, layout, code, launcher)
        if error:
            failures.append(f"{cell.name}: {error}")
        print(f"[{time.time() - started:7.0f} s] {cell.name}: {error or 'done'}", flush=True)
        on_done()

    # In the design's order (the primary before the exploratory runs), each cell once its start
    # has finished: a free worker takes the first cell it can run instead of waiting on a start
    # (the quick grid's second worker began with the DnA pretraining, not idle for the softmax one).
    workers = max(jobs, 1)
    waiting, finished, running = list(cells), set(), {}
    with ThreadPoolExecutor(workers) as pool:
        while waiting or running:
            for cell in list(waiting):
                if len(running) == workers:
                    break
                if cell.start is None or cell.start in finished or cell.start not in cells:
                    waiting.remove(cell)
                    running[pool.submit(work, cell)] = cell
            if not running:  # cannot happen (a start precedes its cells); never spin
                raise RuntimeError(f"no cell can start: {[c.name for c in waiting]}")
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                future.result()
                finished.add(running.pop(future))
    return failures


def _rerun(args: argparse.Namespace, cells: list[Cell], layout: Layout, code: Path, csv_path: Path) -> int:
    """``--only``: the cell again (its start reused when finished), compared with its CSV row."""
    import shutil

    by_name = {c.name: c for c in cells}
    if args.only not in by_name:
        print(f"error: --only {args.only}: no such cell; `--dry-run` lists them (e.g. {cells[-1].name})", file=sys.stderr)
        return 2
    cell = by_name[args.only]
    rerun = Layout(layout.out / "reruns", layout.plan, layout.quick)
    rerun.data = layout.data  # the same rendered videos
    shutil.rmtree(cell.folder(rerun.runs).parent, ignore_errors=True)
    if cell.start is not None:  # the start from the grid when it finished there, else fitted here too
        start_folder = cell.start.folder(layout.runs)
        if cell.start.done(layout.runs):
            target = cell.start.folder(rerun.runs)
            shutil.rmtree(target.parent, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(start_folder, target)
    render_data(layout, sorted({c.task for c in (cell, cell.start) if c} | set(layout.sets_of(cell)) - {"source"}))
    failures = _run_grid([c for c in (cell.start, cell) if c is not None], rerun, code, 1, None, lambda: None)
    if failures:
        print("\n".join(["failed:"] + failures), file=sys.stderr)
        return 1
    new = report.csv_row(json.loads((cell.folder(rerun.runs) / "cell.json").read_text())["row"])
    old = {r["group"] + "/" + report.label_of(r) + "/seed" + r["seed"]: r for r in report.read_csv(csv_path)}.get(cell.name)
    if old is None:
        print(f"{cell.name}: rerun in {cell.folder(rerun.runs)}; no row in {csv_path} to compare with")
        return 0
    differ = [k for k in report.COLUMNS if k not in TIMING and str(old.get(k, "")) != str(new.get(k, ""))]
    recorded = csv_path.parent / csv_path.stem / f"{cell.name}.json"
    if recorded.is_file():  # say so when the data are not the recorded ones: a re-render moves a run
        then = json.loads(recorded.read_text())["provenance"]
        now = json.loads((cell.folder(rerun.runs) / "provenance.json").read_text())
        for key in ("data_sha256", "cpu_capability", "versions"):
            if then.get(key) != now.get(key):
                print(f"note: {key} differs from the recorded run's (then {then.get(key)}, now {now.get(key)})")
    if differ:
        print(f"{cell.name}: NOT reproduced; differs in " + ", ".join(f"{k} (csv {old.get(k)!r}, now {new.get(k)!r})"
                                                                      for k in differ))
        return 1
    print(f"{cell.name}: reproduced: every column of its row equal ({', '.join(TIMING)} aside)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    out, csv_path, records = _paths(args)
    plan_path = Path(args.plan).resolve()
    plan = design.load_plan(plan_path)
    if args.table:
        try:
            print(report.table(report.read_csv(csv_path), plan))
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.update_docs:
        from experiments.denoising import docs

        for path in docs.update(report.read_csv(csv_path), plan):
            print(f"rewritten: {path}")
        return 0
    if args.plots:
        for path in report.plots(report.read_csv(csv_path), plan, csv_path.parent):
            print(f"written: {path}")
        return 0
    if args.pilot_report:
        print(report.pilot_report(report.read_csv(csv_path), plan))
        return 0
    cells = _select(design.cells(plan, args.quick, calibration=args.calibrate), args.groups)
    layout = Layout(out, plan, args.quick)
    if args.dry_run:
        print(f"{len(cells)} cells, {sum(c.done(layout.runs) for c in cells)} finished; runs under {layout.runs}")
        if not plan["primary"].get("pairs") and not args.quick:
            print("  (the primary cells appear once the plan states its number of pairs: --pilot-report)")
        for cell in cells:
            print(f"  [{'finished' if cell.done(layout.runs) else 'to run'}] {cell.name}")
        return 0

    if not args.inside:
        sensitivity = _sensitivity_csv(csv_path)
        outputs = tuple(str(p.relative_to(REPO)) for p in (csv_path, records, sensitivity, sensitivity.with_suffix(""))
                        if p.is_relative_to(REPO))
        if args.at:  # an explicit commit: its worktree is clean whatever this checkout holds
            state = tree_state(REPO)
            state = type(state)(state.root, resolve_commit(REPO, args.at), ())
        else:
            state = require_clean(REPO, args.allow_dirty, "python -m experiments.denoising", outputs)
        commit = state.commit
        if args.only and not state.dirty:
            row = {report.cell_name(r): r for r in report.read_csv(csv_path)}.get(args.only) if csv_path.is_file() else None
            if row is not None:
                if row["commit"].endswith("+dirty"):
                    print(f"error: {args.only}: its row was run from a tree with uncommitted changes "
                          f"({row['commit']}); it cannot be reproduced", file=sys.stderr)
                    return 1
                commit = row["commit"]
        if not state.dirty:
            rest = [a for a in argv if a not in ("--allow-dirty",)]
            return _in_worktree(_without(rest, ("--out", "--csv", "--plan", "--at")), commit, out, csv_path, plan_path)
        code = state.root
    else:
        code = tree_state(Path.cwd()).root
    import torch

    torch.set_num_threads(1)  # measures run in this process: one thread each, like the fits
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

    if args.only:
        return _rerun(args, cells, layout, code, csv_path)
    if args.sensitivity:
        from experiments.denoising import sensitivity

        by_name = {c.name: c for c in cells}
        if args.sensitivity not in by_name:
            print(f"error: --sensitivity {args.sensitivity}: no such cell; `--dry-run` lists them", file=sys.stderr)
            return 2
        return sensitivity.run(by_name[args.sensitivity], layout, code, _sensitivity_csv(csv_path))
    # The fits fork from a process that imported the toolkit once, started here (before any
    # thread) so that its imports overlap the rendering; --only reruns a cell as a plain
    # process, so it also checks that both give one row.
    launcher = ForkedCli(single_thread_env(code))
    needed = sorted({c.task for c in cells} | {s for c in cells for s in layout.sets_of(c)} - {"source"})
    render_data(layout, needed)
    # The CSV holds every finished cell of the plan, the calibration's included.
    all_cells = list(dict.fromkeys(design.cells(plan, args.quick) + design.cells(plan, args.quick, calibration=True)))

    def write_results() -> None:
        report.write_results(all_cells + [c for c in cells if c not in all_cells], layout, csv_path, records)

    failures = _run_grid(cells, layout, code, args.jobs, args.hours, write_results, launcher)
    write_results()
    rows = report.read_csv(csv_path)
    print(f"\n{len(rows)} runs in {csv_path}\n")
    if args.calibrate:
        print(report.calibration_report(rows, plan))
    else:
        print(report.table(rows, plan))
        for path in report.plots(rows, plan, csv_path.parent):
            print(f"written: {path}")
    if failures:
        print("\n".join(["not finished:"] + failures), file=sys.stderr)
        return 1
    return 0


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` without ``options`` and their values (the worktree's process gets them resolved)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in options:
            skip = True
            continue
        if any(arg.startswith(o + "=") for o in options):
            continue
        out.append(arg)
    return out


if __name__ == "__main__":
    sys.exit(main())
