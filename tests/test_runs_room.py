"""``dna_video.runs``: what a run left behind (folders, ``runs.jsonl``, ``summary.json``, the
model card) is read and written without torch or Lightning, and the model card is made of short
functions."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# In a process where importing torch, torchvision or Lightning fails: every module of the room
# imports, and its plain-file functions work on a run folder made here.
NO_TORCH = r"""
import json, sys
from pathlib import Path
for blocked in ("torch", "torchvision", "lightning", "pytorch_lightning"):
    sys.modules[blocked] = None
import dna_video.runs
import dna_video.runs.card, dna_video.runs.folders, dna_video.runs.lineage, dna_video.runs.registry, dna_video.runs.summary
from dna_video.runs import (Experiment, claim_version_folder, evaluation_folder, find_latest_run, fit_summary,
                            read_summary, record_run, run_files)

root = Path(sys.argv[1])
run, number = claim_version_folder(root / "exp")
(run / "checkpoints").mkdir()
(run / "checkpoints" / "last.ckpt").write_bytes(b"not read")
(run / "summary.json").write_text(json.dumps({"fit": {"epochs": 2, "global_step": 6}, "log_dir": str(run)}))
experiment = Experiment("CSVLogger", str(root), "exp")
record_run(experiment, number, str(run), str(run / "checkpoints"))
try:
    dna_video.runs.model_card(run / "checkpoints" / "last.ckpt")
    card = "made"
except ImportError as error:
    card = "ImportError"
print(json.dumps({
    "run": str(run), "files": run_files(run), "evaluation": str(evaluation_folder(run / "checkpoints" / "last.ckpt")),
    "latest": find_latest_run(experiment).version, "fit": fit_summary(read_summary(run)), "card": card,
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "lightning", "torchvision")
                     and sys.modules[m] is not None),
}))
"""


def test_the_runs_room_works_where_torch_does_not_import(tmp_path):
    done = subprocess.run([sys.executable, "-c", NO_TORCH, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    run = tmp_path / "exp" / "version_0"
    assert got["run"] == str(run) and got["evaluation"] == str(run)
    assert got["files"] == ["summary.json", "checkpoints/last.ckpt"]
    assert got["latest"] == "0"
    assert got["fit"] == f"fit finished: 2 epoch(s), 6 optimiser steps\n  logs: {run} (summary.json)"
    assert got["card"] == "ImportError" and got["loaded"] == []  # a card needs torch: it says so when made
    registry = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [(r["name"], r["version"], r["checkpoint_dir"]) for r in registry] == [("exp", "0", str(run / "checkpoints"))]


MAX_FUNCTION_LINES = 50


def test_the_model_card_is_made_of_functions_of_at_most_50_lines():
    """``model_card`` was one function of 158 lines; its parts (and the weights' lineage) stay
    short enough to read whole."""
    long = []
    for name in ("card.py", "lineage.py"):
        path = REPO / "dna_video" / "runs" / name
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
