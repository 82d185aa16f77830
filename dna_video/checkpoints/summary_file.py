"""Reading a run's ``summary.json`` (written by :class:`dna_video.callbacks.run_summary.RunSummary`):
plain JSON, read without Lightning, by the model card (:mod:`.card`) as by the command line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["SUMMARY_FILE", "read_summary"]

SUMMARY_FILE = "summary.json"


def read_summary(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The summary of the run in ``run_dir`` ({} when it has none yet)."""
    path = Path(run_dir) / SUMMARY_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
