"""What a run's numbers depend on besides its code and seed: one cell of the grid fitted again
under one change of its environment at a time (``python -m experiments.denoising --sensitivity
CELL``), each fit a plain process with the grid's command, measured as the grid measures. The
record (``experiments/results/denoising_sensitivity.csv`` and a JSON per change beside it) is
what docs/denoising.md's reproducibility table is generated from.

The changes: none (twice: the run repeats itself), two threads, torch's CPU kernel path AVX2
and default instead of the machine's, MKL and oneDNN held to AVX2, and the training videos
rendered a second time (their bytes compared with the first render's).
"""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from experiments.denoising.design import Cell
from experiments.denoising.runs import Layout, final_checkpoint, folder_digest, render_data, run_cell

__all__ = ["CHANGES", "Change", "run", "table", "read"]


@dataclass(frozen=True)
class Change:
    name: str
    what: str  # the table's words
    env: tuple[tuple[str, str], ...] = ()  # set in the fit's process (beside the one-thread environment)
    rerender: bool = False  # the training videos rendered again, into a folder of their own


CHANGES = (
    Change("none", "none"),
    Change("none_again", "none, run again"),
    Change("threads_2", "2 threads", (("OMP_NUM_THREADS", "2"), ("MKL_NUM_THREADS", "2"))),
    Change("kernels_avx2", "torch's kernel path AVX2", (("ATEN_CPU_CAPABILITY", "avx2"),)),
    Change("kernels_default", "torch's kernel path default (no vector ISA)", (("ATEN_CPU_CAPABILITY", "default"),)),
    Change("mkl_onednn_avx2", "MKL and oneDNN held to AVX2", (("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
                                                               ("DNNL_MAX_CPU_ISA", "AVX2"))),
    Change("rerendered", "the training videos rendered again", rerender=True),
)

COLUMNS = ["change", "what", "in_distribution_top1", "shifted_top1", "shifted_distractor_confusion",
           "weights_sha256", "same_weights_as_none", "train_data_sha256", "cpu_capability_in_fit", "threads_in_fit",
           "cpu", "commit"]


def weights_digest(checkpoint: Path) -> str:
    """sha256 over the network's tensors (names and bytes, sorted): equal iff the weights are."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode() + b"\0" + state[name].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _fit_environment(code: Path, env: dict[str, str]) -> tuple[str, int]:
    """torch's kernel path and thread count in a process with the fit's environment."""
    from experiments.reproducible import single_thread_env

    probe = "import torch; print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())"
    done = subprocess.run([sys.executable, "-c", probe], env=single_thread_env(code) | env, capture_output=True,
                          text=True, check=True)
    capability, threads = done.stdout.split()
    return capability, int(threads)


def run(cell: Cell, grid: Layout, code: Path, csv_path: Path) -> int:
    """Fit and measure ``cell`` under every change (finished ones kept), write the record."""
    from dna_video.common.atomic import atomic_path, write_json
    from experiments.reproducible import environment, tree_state

    if cell.start is not None:
        print(f"error: --sensitivity {cell.name}: give a cell trained from scratch (e.g. scratch/dna/seed0)",
              file=sys.stderr)
        return 2
    render_data(grid, sorted({cell.task} | set(grid.sets_of(cell))))
    rows, failures = [], []
    for change in CHANGES:
        out = grid.out / "sensitivity" / cell.name.replace("/", "_") / change.name
        layout = Layout(out, grid.plan, grid.quick, test_data=grid.data)
        if change.rerender:
            render_data(layout, [cell.task])
        else:
            layout.data = grid.data
        env = dict(change.env)
        error = run_cell(cell, layout, code, None, fit_env=env)
        if error:
            failures.append(f"{change.name}: {error}")
            continue
        found = json.loads((cell.folder(layout.runs) / "cell.json").read_text())
        row, provenance = found["row"], found["provenance"]
        capability, threads = _fit_environment(code, env)
        rows.append({
            "change": change.name, "what": change.what,
            **{k: f"{row[k]:.6f}" for k in ("in_distribution_top1", "shifted_top1", "shifted_distractor_confusion")},
            "weights_sha256": weights_digest(final_checkpoint(cell.folder(layout.runs))),
            "train_data_sha256": folder_digest(layout.train_root(cell.task)),
            "cpu_capability_in_fit": capability, "threads_in_fit": threads, "cpu": provenance["cpu"],
            "commit": provenance["commit"] + ("+dirty" if provenance["dirty"] else ""),
        })
        write_json(csv_path.parent / csv_path.stem / f"{change.name}.json",
                   {"cell": cell.name, "change": change.name, "fit_env": env, "row": row, "details": found["details"],
                    "provenance": provenance, "measured_in": environment(tree_state(code))})
        print(f"{change.name}: shifted top-1 {100 * row['shifted_top1']:.1f}%", flush=True)
    base = next((r["weights_sha256"] for r in rows if r["change"] == "none"), None)
    for row in rows:
        row["same_weights_as_none"] = "" if base is None else ("yes" if row["weights_sha256"] == base else "no")
    with atomic_path(csv_path) as partial, open(partial, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"\n{table(read(csv_path), cell.name)}")
    if failures:
        print("\n".join(["failed:"] + failures), file=sys.stderr)
        return 1
    return 0


def read(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no sensitivity record; run python -m experiments.denoising --sensitivity CELL")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def table(rows: list[dict], cell: str | None = None) -> str:
    """The reproducibility table of docs/denoising.md, from the record."""
    head = ("One cell" + (f" (`{cell}`)" if cell else "") + " fitted again under one change at a time (the fit only; "
            "measured as the grid measures), from the commit "
            + ", ".join(sorted({r["commit"][:12] for r in rows})) + " on " + ", ".join(sorted({r["cpu"] for r in rows}))
            + " (`.venv/bin/python -m experiments.denoising --sensitivity`; record: `experiments/results/denoising_sensitivity.csv`).")
    lines = [head, "", "| change (1 thread unless said) | kernel path, threads in the fit | in-dist. top-1 | shifted "
             "top-1 | shifted confusion | weights equal to the first run's |", "|---|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['what']} | {r['cpu_capability_in_fit']}, {r['threads_in_fit']} "
                     f"| {100 * float(r['in_distribution_top1']):.1f} | {100 * float(r['shifted_top1']):.1f} "
                     f"| {100 * float(r['shifted_distractor_confusion']):.1f} | {r['same_weights_as_none']} |")
    rendered = [r for r in rows if r["change"] == "rerendered"]
    others = {r["train_data_sha256"] for r in rows if r["change"] != "rerendered"}
    if rendered and others:
        same = rendered[0]["train_data_sha256"] in others
        lines += ["", "The second render's training videos are " + ("byte for byte the first's" if same else
                                                                   "NOT the first's bytes") +
                  f" (sha256 {rendered[0]['train_data_sha256'][:12]})."]
    return "\n".join(lines)

