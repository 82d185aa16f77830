"""What marks a folder as a run's, for the commands that read runs (``predict`` writes beside
a checkpoint's run) without the training code that writes them: no torch, no Lightning."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["RUN_FILES", "run_files", "evaluation_folder"]

# Files that mark a folder as holding a run.
RUN_FILES = ("summary.json", "config.yaml", "hparams.yaml", "metrics.csv")


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
