"""The block printed at the end of ``fit``: where the results are."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

__all__ = ["fit_summary"]


def _number(value: Any) -> str:
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError):
        return str(value)


def fit_summary(trainer: L.Trainer, test_metrics: dict[str, Any] | None = None) -> str:
    """Best score and its checkpoint, last checkpoint, test metrics (if run) and log folder."""
    lines = [f"fit finished: {trainer.current_epoch} epoch(s), {trainer.global_step} optimiser steps"]
    for callback in trainer.checkpoint_callbacks:
        if not isinstance(callback, ModelCheckpoint):
            continue
        if callback.monitor is None:
            if callback.best_model_path:
                lines.append(f"  last checkpoint: {callback.best_model_path}")
        elif callback.best_model_path:
            lines.append(f"  best {callback.monitor} = {_number(callback.best_model_score)}: {callback.best_model_path}")
        else:
            lines.append(f"  best {callback.monitor}: no checkpoint written")
    if test_metrics:
        shown = ", ".join(f"{k} {_number(v)}" for k, v in sorted(test_metrics.items())
                          if not k.endswith("failed_videos") or float(v))
        lines.append(f"  test ({'best' if trainer.checkpoint_callback else 'last'} weights): {shown}")
    if trainer.logger is not None:
        lines.append(f"  logs: {trainer.log_dir}")
    return "\n".join(lines)
