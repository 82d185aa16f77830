"""Evaluation report of ``cli.py test``: metrics JSON, per-video predictions CSV, confusion PNG.

Collects what ``test_step`` returns per video (path, label, the probabilities of the MEAN of
its views, :func:`~dna_video.tasks.views.mean_view_probs`, and the predicted class the metrics
count) and writes, in the run folder (the logger's, as ``config.yaml`` and the metrics are;
with ``fit --test_after_fit true`` the trained run's):

* ``test_metrics.json``: :func:`~dna_video.analysis.evaluation_report.evaluation_report` plus the
  checkpoint tested;
* ``test_predictions.csv``: one row per video, the columns of ``predict``'s CSV;
* ``test_confusion.png``: the confusion matrix, rows normalised by true class.

Under DDP every process holds part of the videos (each video once: the test sampler does not
pad); they are gathered on rank 0, which alone writes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback

from dna_video.analysis.plotting import confusion_png
from dna_video.common.atomic import write_json
from dna_video.data.records import dataset_order
from dna_video.analysis.evaluation_report import evaluation_report
from dna_video.training.callbacks.predictions import write_predictions_csv

log = logging.getLogger(__name__)

__all__ = ["EvaluationReportWriter"]


class EvaluationReportWriter(Callback):
    """Write the evaluation report of every ``test`` run.

    Args:
        folder: where to write; None: the logger's run folder (``trainer.log_dir``), else
            ``trainer.default_root_dir``.
        prefix: file-name prefix (``test_`` -> ``test_metrics.json``...).
        top_k: classes listed per video in the CSV.
        ece_bins: equal-width bins of the ECE (torchmetrics).
        calibration_bin_size: videos per adaptive bin of the RMS calibration error.
    """

    __test__ = False  # not a pytest test class despite its name

    def __init__(self, folder: str | None = None, prefix: str = "test_", top_k: int = 5, ece_bins: int = 15,
                 calibration_bin_size: int = 100) -> None:
        self.folder = folder
        self.prefix = prefix
        self.top_k = top_k
        self.ece_bins = ece_bins
        self.calibration_bin_size = calibration_bin_size
        self._outputs: list[dict[str, Any]] = []

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._outputs = []

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        if not isinstance(outputs, dict) or "probs" not in outputs:
            return  # every video of the batch failed to decode
        self._outputs.append({
            "path": [str(p) for p in outputs["path"]],
            "label": torch.as_tensor(outputs["label"]).cpu(),
            "probs": outputs["probs"].detach().float().cpu(),
            "pred": torch.as_tensor(outputs["pred"]).cpu(),
        })

    def _gathered(self, trainer: L.Trainer) -> list[dict[str, Any]]:
        """Every process's outputs (the whole test set) on every process."""
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            parts: list[Any] = [None] * trainer.world_size
            dist.all_gather_object(parts, self._outputs)
            return _in_dataset_order([out for part in parts for out in part], trainer)
        return list(self._outputs)

    def _folder(self, trainer: L.Trainer) -> Path:
        return Path(self.folder or trainer.log_dir or trainer.default_root_dir)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        outputs = self._gathered(trainer)  # every rank takes part in the gather
        folder = self._folder(trainer)  # and in trainer.log_dir, a broadcast under DDP
        if not outputs or not trainer.is_global_zero:
            return
        probs = torch.cat([o["probs"] for o in outputs])
        labels = torch.cat([o["label"] for o in outputs])
        # The DataModule's names, else any the module keeps (e.g. restored from a checkpoint).
        source = trainer.datamodule if hasattr(trainer.datamodule, "class_names") else pl_module
        names = getattr(source, "class_names", None)
        names = list(names) if names and len(names) == probs.shape[1] else None
        report = evaluation_report(probs, labels, names, self.ece_bins, self.calibration_bin_size)
        report["checkpoint"] = str(trainer.ckpt_path) if trainer.ckpt_path else None
        report["aggregate"] = getattr(getattr(pl_module, "evaluation", None), "aggregate", "logits")
        folder.mkdir(parents=True, exist_ok=True)
        metrics = folder / f"{self.prefix}metrics.json"
        write_json(metrics, report)
        write_predictions_csv(folder / f"{self.prefix}predictions.csv", outputs, report["class_names"], self.top_k)
        confusion_png(report["confusion_matrix"], report["class_names"], folder / f"{self.prefix}confusion.png")
        log.info(
            "test report (%d videos: top-1 %.4f, mca %.4f, ECE %.4f, RMS calibration error %.4f, AURRA %.4f) "
            "written to %s: %s, %spredictions.csv, %sconfusion.png", report["num_videos"], report["top1"],
            report["mca"], report["ece"], report["rms_calibration_error"], report["aurra"], folder, metrics.name,
            self.prefix, self.prefix,
        )


def _in_dataset_order(outputs: list[dict[str, Any]], trainer: L.Trainer) -> list[dict[str, Any]]:
    """The videos of every process's outputs as one output, in the test set's order (each
    process holds every world-size-th video): the report and its CSV are the single process's."""
    if not outputs:
        return outputs
    paths = [p for out in outputs for p in out["path"]]
    dataset = getattr(trainer.test_dataloaders, "dataset", None)
    place = dataset_order(dataset)
    order = sorted(range(len(paths)), key=lambda i: (place.get(paths[i], len(place)), i))
    index = torch.tensor(order, dtype=torch.long)
    return [{"path": [paths[i] for i in order],
             **{key: torch.cat([torch.as_tensor(out[key]) for out in outputs])[index] for key in ("label", "probs", "pred")}}]


# The 0.1 name (dna_video.callbacks.test_report.TestReportWriter), kept for one release.
TestReportWriter = EvaluationReportWriter
