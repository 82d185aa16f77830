"""Per-video predictions of ``cli.py predict`` in a CSV file, ``predictions.csv`` in the run folder.

One row per video, columns :data:`PREDICTION_COLUMNS`:

* ``path``: the video file; ``label``: its true class index, empty when unknown;
* ``pred``, ``pred_name``: the predicted class index and name (empty without class names);
* ``prob``: the probability of the predicted class; ``top_k``: the k most probable classes
  as ``index:probability`` pairs, most probable first.

Probabilities are those of the mean of a video's views (:func:`dna_video.tasks.views.mean_view_probs`).
The rows are :func:`dna_video.prediction.records.csv_rows` (``dna-video predict --out`` writes the
same, with PyTorch or ONNX Runtime).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from dna_video.data.records import dataset_order
from dna_video.prediction.records import PREDICTION_COLUMNS, csv_rows, write_csv

log = logging.getLogger(__name__)

__all__ = ["PREDICTION_COLUMNS", "PredictionWriter", "prediction_rows", "write_predictions_csv"]


def prediction_rows(out: dict[str, Any], class_names: Sequence[str] | None = None, top_k: int = 5) -> list[list]:
    """CSV rows (:data:`PREDICTION_COLUMNS`) of one ``predict_step`` output: a dict of
    ``path``, ``label``, ``probs`` (B, K) and ``pred``."""
    labels = out.get("label")
    return csv_rows(out["path"], out["probs"].float().cpu().numpy(), None if labels is None else [int(x) for x in labels],
                    [int(p) for p in out["pred"]], class_names, top_k)


def write_predictions_csv(
    path: str | Path, outputs: Iterable[dict[str, Any] | None], class_names: Sequence[str] | None = None, top_k: int = 5
) -> int:
    """Write the per-video outputs of ``predict_step`` (None entries skipped) as CSV rows;
    returns the row count."""
    rows = [row for out in outputs if out is not None for row in prediction_rows(out, class_names, top_k)]
    write_csv(path, rows)
    return len(rows)


class PredictionWriter(BasePredictionWriter):
    """Write ``predictions.csv`` (see the module docstring) when ``predict`` ends. Enabled by
    default in the CLI; it acts only in ``predict``. Under DDP every process predicts its
    share of the videos and rank 0 writes them all, in the dataset's order.

    Args:
        filename: CSV file name, written in the logger's run folder (or ``trainer.default_root_dir``).
        top_k: how many classes to list per video.
    """

    def __init__(self, filename: str = "predictions.csv", top_k: int = 5) -> None:
        # Rows are made per batch (strategies that spawn processes keep no predictions for
        # the epoch end) and written at the end of the epoch.
        super().__init__(write_interval="batch_and_epoch")
        self.filename = filename
        self.top_k = top_k
        self._pending: list[list] = []

    def on_predict_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._pending = []

    def write_on_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, prediction, batch_indices,
                           batch, batch_idx: int, dataloader_idx: int) -> None:
        if prediction is not None:
            names = getattr(trainer.datamodule, "class_names", None) if trainer.datamodule is not None else None
            self._pending.extend(prediction_rows(prediction, names, self.top_k))

    def write_on_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, predictions, batch_indices) -> None:
        rows, self._pending = self._pending, []
        # trainer.log_dir is a collective under DDP: every rank asks for it, before rank 0 alone writes.
        folder = Path(trainer.log_dir or trainer.default_root_dir)
        if trainer.world_size > 1:
            shares: list = [None] * trainer.world_size
            torch.distributed.all_gather_object(shares, rows)
            if not trainer.is_global_zero:
                return
            # Each video is predicted once (the evaluation sampler does not pad): dataset order.
            rows = [row for share in shares for row in share]
            dataset = getattr(trainer.predict_dataloaders, "dataset", None)
            order = dataset_order(dataset)
            rows.sort(key=lambda row: order.get(row[0], len(order)))
        if not rows:
            return
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.filename
        write_csv(path, rows)
        log.info("wrote %d predictions to %s", len(rows), path)
