"""Write per-video predictions of ``cli.py predict`` to a CSV file."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

log = logging.getLogger(__name__)

__all__ = ["PredictionWriter"]


class PredictionWriter(BasePredictionWriter):
    """Collect ``predict_step`` outputs and write one CSV row per video: path, true label
    (if known), predicted class index and name, its probability, and the top-k classes.

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
            self._pending.extend(self._rows(prediction, names))

    def write_on_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, predictions, batch_indices) -> None:
        rows, self._pending = self._pending, []
        # trainer.log_dir is a collective under DDP: every rank asks for it, before rank 0 alone writes.
        folder = Path(trainer.log_dir or trainer.default_root_dir)
        if trainer.world_size > 1:
            # Every process predicted its share of the videos: rank 0 writes them all, in the
            # dataset's order (each video is predicted once: the evaluation sampler does not pad).
            shares: list = [None] * trainer.world_size
            torch.distributed.all_gather_object(shares, rows)
            if not trainer.is_global_zero:
                return
            rows = [row for share in shares for row in share]
            dataset = getattr(trainer.predict_dataloaders, "dataset", None)
            order = {r.path: i for i, r in enumerate(getattr(dataset, "records", []))}
            rows.sort(key=lambda row: order.get(row[0], len(order)))
        if not rows:
            return
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.filename
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["path", "label", "pred", "pred_name", "prob", "top_k"])
            writer.writerows(rows)
        log.info("wrote %d predictions to %s", len(rows), path)

    def _rows(self, out: dict, names: list[str] | None) -> list[list]:
        probs = out["probs"].float().cpu()
        k = min(self.top_k, probs.shape[1])
        top = torch.topk(probs, k, dim=1)
        labels = out.get("label")
        rows = []
        for i, video in enumerate(out["path"]):
            pred = int(top.indices[i, 0])
            ranked = " ".join(f"{int(c)}:{float(p):.4f}" for p, c in zip(top.values[i], top.indices[i]))
            rows.append([
                video,
                int(labels[i]) if labels is not None else "",
                pred,
                names[pred] if names else "",
                f"{float(top.values[i, 0]):.6f}",
                ranked,
            ])
        return rows
