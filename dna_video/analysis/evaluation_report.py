"""Evaluation reports: accuracy, per-class behaviour, calibration and selective prediction.

Everything here works on per-video class probabilities (N, K) and labels (N,), whatever
produced them (``cli.py test``, ``dna-video predict``, a notebook):

* the probabilities to pass are those of the MEAN of a video's views
  (:func:`dna_video.tasks.views.mean_view_probs`), never the softmax of a SUM of logits: with V
  views that is softmax(V * mean), which sharpens every probability and so spoils
  calibration figures;
* :func:`evaluation_report`: top-1, top-5, mean per-class accuracy over the classes present,
  per-class accuracy by name, confusion counts (torchmetrics), ECE (torchmetrics, fixed bins),
  RMS calibration error with adaptive bins of 100 videos and AURRA (written here: torchmetrics
  has neither).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics.functional.classification import (
    multiclass_accuracy,
    multiclass_calibration_error,
    multiclass_confusion_matrix,
)

from dna_video.tasks.metrics import mean_class_accuracy

__all__ = ["rms_calibration_error", "aurra", "evaluation_report"]


def _confidence_correct(probs: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    confidence, pred = probs.float().max(dim=1)
    return confidence.double(), (pred == labels).double()


def rms_calibration_error(confidence: Tensor, correct: Tensor, bin_size: int = 100) -> float:
    """RMS calibration error with adaptive bins (Hendrycks et al.'s ``calib_err``, p = 2).

    Videos sorted by confidence ascending go into bins of ``bin_size`` from the low end; the
    remainder joins the last bin (fewer than ``bin_size`` videos: one bin). Every bin counts
    (the reference loop skips the last one):
    sqrt(sum_b (n_b / N) (mean confidence_b - accuracy_b)^2).
    """
    n = confidence.numel()
    if n == 0:
        return math.nan
    order = torch.argsort(confidence, stable=True)
    num_bins = max(n // bin_size, 1)
    bin_of = (torch.arange(n) // bin_size).clamp(max=num_bins - 1)
    conf_sum = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, bin_of, confidence[order].double())
    hit_sum = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, bin_of, correct[order].double())
    count = torch.bincount(bin_of, minlength=num_bins).double()
    gap = conf_sum / count - hit_sum / count
    return float(((count / n) * gap.square()).sum().sqrt())


def aurra(confidence: Tensor, correct: Tensor) -> float:
    """Area under the response-rate accuracy curve: the mean over r = 1..N of the accuracy of
    the r most confident videos (ties kept in input order)."""
    n = confidence.numel()
    if n == 0:
        return math.nan
    order = torch.argsort(confidence, descending=True, stable=True)
    accuracy_at_r = correct[order].double().cumsum(0) / torch.arange(1, n + 1, dtype=torch.float64)
    return float(accuracy_at_r.mean())


def evaluation_report(
    probs: Tensor,
    labels: Tensor,
    class_names: Sequence[str] | None = None,
    ece_bins: int = 15,
    calibration_bin_size: int = 100,
) -> dict[str, Any]:
    """Metrics of per-video probabilities ``probs`` (N, K) against ``labels`` (N,).

    Keys: ``num_videos``, ``num_classes``, ``class_names``, ``top1``, ``top5``, ``mca`` (mean
    over the classes present), ``per_class_accuracy`` (name -> accuracy, null for a class
    without videos), ``per_class_count``, ``confusion_matrix`` (counts, row = true class,
    column = prediction), ``ece`` (torchmetrics, ``ece_bins`` equal-width bins, L1),
    ``rms_calibration_error`` (adaptive bins of ``calibration_bin_size``), ``aurra``.
    """
    probs = probs.float()
    labels = labels.long()
    n, k = probs.shape
    names = list(class_names) if class_names is not None else [str(i) for i in range(k)]
    if len(names) != k:
        raise ValueError(f"{len(names)} class names for {k} classes")
    if n == 0:
        raise ValueError("no videos to report on")
    confusion = multiclass_confusion_matrix(probs, labels, num_classes=k)
    count = confusion.sum(dim=1)
    correct_per_class = confusion.diagonal()
    present = count > 0
    per_class = {
        name: (int(correct_per_class[i]) / int(count[i]) if present[i] else None) for i, name in enumerate(names)
    }
    confidence, correct = _confidence_correct(probs, labels)
    return {
        "num_videos": n,
        "num_classes": k,
        "class_names": names,
        "top1": float(correct.mean()),
        "top5": float(multiclass_accuracy(probs, labels, num_classes=k, top_k=min(5, k), average="micro")),
        "mca": float(mean_class_accuracy(correct_per_class, count)),
        "per_class_accuracy": per_class,
        "per_class_count": {name: int(count[i]) for i, name in enumerate(names)},
        "confusion_matrix": confusion.tolist(),
        "ece": float(multiclass_calibration_error(probs, labels, num_classes=k, n_bins=ece_bins, norm="l1")),
        "ece_bins": ece_bins,
        "rms_calibration_error": rms_calibration_error(confidence, correct, calibration_bin_size),
        "calibration_bin_size": calibration_bin_size,
        "aurra": aurra(confidence, correct),
    }
