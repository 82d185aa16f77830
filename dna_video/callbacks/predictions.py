"""Per-video predictions of ``cli.py predict`` in a CSV file, ``predictions.csv`` in the run folder.

One row per video, columns :data:`PREDICTION_COLUMNS`:

* ``path``: the video file; ``label``: its true class index, empty when unknown;
* ``pred``, ``pred_name``: the predicted class index and name (empty without class names);
* ``prob``: the probability of the predicted class; ``top_k``: the k most probable classes
  as ``index:probability`` pairs, most probable first.

Probabilities are those of the mean of a video's views (:func:`dna_video.views.mean_view_probs`).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

log = logging.getLogger(__name__)

__all__ = ["PREDICTION_COLUMNS", "PredictionWriter", "write_predictions_csv"]

PREDICTION_COLUMNS = ("path", "label", "pred", "pred_name", "prob", "top_k")


def write_predictions_csv(
    path: str | Path, outputs: Iterable[dict[str, Any] | None], class_names: Sequence[str] | None = None, top_k: int = 5
) -> int:
    """Write the per-video outputs of ``predict_step`` (dicts of ``path``, ``label``,
    ``probs`` (B, K), ``pred``; None entries skipped) as CSV rows; returns the row count."""
    rows = 0
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(PREDICTION_COLUMNS)
        for out in outputs:
            if out is None:
                continue
            probs = out["probs"].float().cpu()
            top = torch.topk(probs, min(top_k, probs.shape[1]), dim=1)
            labels = out.get("label")
            for i, video in enumerate(out["path"]):
                pred = int(out["pred"][i])
                ranked = " ".join(f"{int(c)}:{float(p):.4f}" for p, c in zip(top.values[i], top.indices[i]))
                writer.writerow([
                    video,
                    int(labels[i]) if labels is not None else "",
                    pred,
                    class_names[pred] if class_names else "",
                    f"{float(probs[i, pred]):.6f}",
                    ranked,
                ])
                rows += 1
    return rows


class PredictionWriter(BasePredictionWriter):
    """Write ``predictions.csv`` (see the module docstring) when ``predict`` ends. Enabled by
    default in the CLI; it acts only in ``predict``.

    Args:
        filename: CSV file name, written in the logger's run folder (or ``trainer.default_root_dir``).
        top_k: how many classes to list per video.
    """

    def __init__(self, filename: str = "predictions.csv", top_k: int = 5) -> None:
        super().__init__(write_interval="epoch")
        self.filename = filename
        self.top_k = top_k

    def write_on_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, predictions, batch_indices) -> None:
        if not any(o is not None for o in predictions):
            return
        names = getattr(trainer.datamodule, "class_names", None) if trainer.datamodule is not None else None
        folder = Path(trainer.log_dir or trainer.default_root_dir)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.filename
        if trainer.world_size > 1:  # one file per process; rows never overlap
            path = path.with_stem(f"{path.stem}.rank{trainer.global_rank}")
        rows = write_predictions_csv(path, predictions, names, self.top_k)
        log.info("wrote %d predictions to %s", rows, path)
