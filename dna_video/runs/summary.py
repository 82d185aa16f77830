"""The run summary: reading a run's ``summary.json`` (written by :class:`dna_video.training.callbacks.run_summary.RunSummary`):
plain JSON, read without Lightning, by the model card (:mod:`.card`) as by the command line,
and the block printed at the end of ``fit`` from it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["SUMMARY_FILE", "read_summary", "fit_summary"]

SUMMARY_FILE = "summary.json"


def read_summary(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The summary of the run in ``run_dir`` ({} when it has none yet)."""
    path = Path(run_dir) / SUMMARY_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _number(value: Any) -> str:
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError):
        return str(value)


def fit_summary(summary: dict[str, Any]) -> str:
    """Best score and its checkpoint, last checkpoint, test metrics (if run) and log folder,
    from what :class:`~dna_video.training.callbacks.run_summary.RunSummary` recorded."""
    fit = summary.get("fit", {})
    lines = [f"fit finished: {fit.get('epochs', '?')} epoch(s), {fit.get('global_step', '?')} optimiser steps"]
    if fit.get("best_checkpoint"):
        lines.append(f"  best {fit.get('monitor')} = {_number(fit.get('best_score'))}: {fit['best_checkpoint']}")
    if fit.get("last_checkpoint"):
        lines.append(f"  last checkpoint: {fit['last_checkpoint']}")
    test = summary.get("test") or {}
    if test.get("metrics"):
        shown = ", ".join(f"{k} {_number(v)}" for k, v in sorted(test["metrics"].items())
                          if not k.endswith("failed_videos") or v)
        lines.append(f"  test ({test.get('checkpoint') or 'last weights'}): {shown}")
    if summary.get("log_dir"):
        lines.append(f"  logs: {summary['log_dir']} (summary.json)")
    return "\n".join(lines)
