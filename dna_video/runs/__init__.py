"""What a run left behind, read and written as plain files and JSON: no torch, no Lightning at
import (a model card imports torch when it builds the network).

* :mod:`.folders`: what marks a folder as a run's (``RUN_FILES``), the run folder of a
  checkpoint, the atomic claim of a new ``version_N``;
* :mod:`.registry`: ``runs.jsonl``, one line per ``fit``; the latest run of an experiment
  (``--ckpt_path last``) and the run a checkpoint belongs to;
* :mod:`.summary`: the run's ``summary.json`` and the block ``fit`` prints at its end;
* :mod:`.card`: the model card of a checkpoint (``dna-video checkpoints card``), with
  :mod:`.lineage`: the weights a run started from, back to their source, and their licences.

What needs Lightning (atomic checkpoint files, the logger of a run, the checks before a command
writes) is :mod:`dna_video.training.runs`. In 0.1 ``dna_video.runs`` was that module: its names
that live there now still resolve here until 0.4, with a DeprecationWarning.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from dna_video.runs.card import model_card
from dna_video.runs.folders import RUN_FILES, claim_version_folder, evaluation_folder, run_files, run_folder
from dna_video.runs.lineage import Origin, weights_history
from dna_video.runs.registry import (
    NAME_ARGUMENT,
    REGISTRY,
    Experiment,
    RestoreError,
    RunRecord,
    find_latest_run,
    read_records,
    record_run,
    run_of_checkpoint,
)
from dna_video.runs.summary import SUMMARY_FILE, fit_summary, read_summary

__all__ = [
    "Experiment",
    "NAME_ARGUMENT",
    "Origin",
    "REGISTRY",
    "RUN_FILES",
    "RestoreError",
    "RunRecord",
    "SUMMARY_FILE",
    "claim_version_folder",
    "evaluation_folder",
    "find_latest_run",
    "fit_summary",
    "model_card",
    "read_records",
    "read_summary",
    "record_run",
    "run_files",
    "run_folder",
    "run_of_checkpoint",
    "weights_history",
]

# 0.1's ``dna_video.runs`` names that need Lightning: in dna_video.training.runs since 0.2.
# Imported by name when asked for (this package sits below the command line and imports none of it).
_TRAINING_NAMES = (
    "AtomicCheckpointIO", "AtomicSaveConfig", "compare_hparams", "read_run_checkpoint", "set_logger_version",
    "claim_run_folder", "start_run", "keep_csv_metrics", "prepare_restore",
    "VERSION_ARGUMENT", "NETWORK_HPARAMS", "IGNORED_HPARAMS",
)


def __getattr__(name: str) -> Any:
    if name not in _TRAINING_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to dna_video.training.runs in dna-video 0.2; the old path goes in 0.4",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module("dna_video.training.runs"), name)
