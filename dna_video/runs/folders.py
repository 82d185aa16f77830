"""Run folders on disk: what marks a folder as a run's, the run folder of a checkpoint, and the
claim of a new ``version_N`` folder. Plain files: no torch, no Lightning (``predict`` writes
beside a checkpoint's run without the training code that wrote it)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["RUN_FILES", "run_files", "evaluation_folder", "run_folder", "claim_version_folder"]

# Files that mark a folder as holding a run.
RUN_FILES = ("summary.json", "config.yaml", "hparams.yaml", "metrics.csv")
# A run folder a folder logger (TensorBoard, CSV) numbers itself: version_<N>.
VERSION_PREFIX = "version_"


def run_files(folder: str | os.PathLike) -> list[str]:
    """What in ``folder`` belongs to a run: its result files and checkpoints (empty: no run)."""
    folder = Path(folder)
    found = [name for name in RUN_FILES if (folder / name).is_file()]
    found += [f"checkpoints/{p.name}" for p in sorted((folder / "checkpoints").glob("*.ckpt"))]
    return found


def evaluation_folder(checkpoint: str | os.PathLike) -> Path | None:
    """The run folder that holds ``checkpoint`` (``<run>/checkpoints/<file>.ckpt`` beside the
    run's files), or None for a checkpoint kept anywhere else."""
    folder = Path(checkpoint).resolve().parent
    if folder.name != "checkpoints" or not run_files(folder.parent):
        return None
    return folder.parent


def run_folder(checkpoint: str | os.PathLike) -> Path:
    """Where the files of ``checkpoint``'s run would be: Lightning writes
    ``<run>/checkpoints/<name>.ckpt`` beside ``<run>/config.yaml``; a checkpoint kept anywhere
    else is looked at in its own folder. (No check that they are there: see :func:`run_files`.)"""
    checkpoint = Path(checkpoint)
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


def _version_numbers(root: Path) -> list[int]:
    return [int(p.name[len(VERSION_PREFIX):]) for p in root.glob(f"{VERSION_PREFIX}*")
            if p.name[len(VERSION_PREFIX):].isdigit()]


def claim_version_folder(root: str | os.PathLike) -> tuple[Path, int]:
    """Create the next free ``<root>/version_N`` and return it with N: one past the highest N
    listed, and past any folder that appears between the listing and the claim. ``mkdir``
    without ``exist_ok`` succeeds for one process only, so two runs started together never
    share a folder, and a folder that exists is never returned."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    number = max(_version_numbers(root), default=-1) + 1
    while True:
        try:
            (root / f"{VERSION_PREFIX}{number}").mkdir()
            return root / f"{VERSION_PREFIX}{number}", number
        except FileExistsError:  # another run claimed it since the listing
            number += 1
