"""``summary.json`` beside each run: what a person or a script needs to know about it afterwards.

Written into the run's log folder at the end of ``fit`` and updated at the end of ``test``:
the best checkpoint and its score, the last checkpoint, epochs and steps done, the test
metrics, training throughput (median over epochs of every ``*clips_per_s`` / ``*samples_per_sec``
quantity logged) and peak memory. ``python -m experiments.paper`` builds its table from these
files; they are plain JSON for any other script too.
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path
from typing import Any

import lightning as L
import torch

from dna_video.runs.summary import SUMMARY_FILE, read_summary
from dna_video.common.atomic import write_json

__all__ = ["RunSummary", "SUMMARY_FILE", "read_summary"]

_RATE_KEYS = ("clips_per_s", "samples_per_sec")


def _number(value: Any) -> float | None:
    value = float(value.item() if isinstance(value, torch.Tensor) else value)
    return value if math.isfinite(value) else None


class RunSummary(L.Callback):
    """Write ``summary.json`` into the run's log folder (rank zero writes)."""

    def __init__(self) -> None:
        self._rates: dict[str, list[float]] = {}

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for key, value in trainer.callback_metrics.items():
            if any(k in key for k in _RATE_KEYS) and (number := _number(value)) is not None:
                self._rates.setdefault(key, []).append(number)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        best = next((c for c in trainer.checkpoint_callbacks if getattr(c, "monitor", None)), None)
        fit: dict[str, Any] = {
            "epochs": trainer.current_epoch,
            "global_step": trainer.global_step,
            "throughput": {key: statistics.median(values) for key, values in self._rates.items()},
            "peak_gpu_memory_gb": (
                torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
            ),
        }
        if best is not None and best.best_model_path:
            fit.update(
                monitor=best.monitor,
                best_checkpoint=os.path.abspath(best.best_model_path),
                best_score=None if best.best_model_score is None else _number(best.best_model_score),
            )
        last = next(
            (c.last_model_path or c.best_model_path for c in trainer.checkpoint_callbacks
             if getattr(c, "monitor", "x") is None and (c.last_model_path or c.best_model_path)),
            None,
        )
        if last:
            fit["last_checkpoint"] = os.path.abspath(last)
        self._update(trainer, fit=fit)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = {k: _number(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
        tested = getattr(trainer, "ckpt_path", None)
        self._update(trainer, test={"checkpoint": os.path.abspath(tested) if tested else None, "metrics": metrics})

    def _update(self, trainer: L.Trainer, **sections: Any) -> None:
        log_dir = trainer.log_dir  # on every rank: a broadcast under DDP
        if log_dir is None or not trainer.is_global_zero:
            return
        run_dir = Path(log_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        summary = read_summary(run_dir)
        summary.update(log_dir=str(run_dir.resolve()), **sections)
        write_json(run_dir / SUMMARY_FILE, summary)  # never a half-written summary
