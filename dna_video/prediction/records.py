"""What ``predict`` reports per video, from class probabilities alone (numpy, no torch): ``predict``
(a checkpoint or an ``.onnx`` model) and ``cli.py test``/``predict``'s CSV writer write the same
records, rows and table.

* :func:`prediction_records`: one dict per video, the JSON output;
* :func:`csv_rows` / :func:`write_csv`: the CSV, columns :data:`PREDICTION_COLUMNS`: ``path``,
  ``label`` (its true class index, empty when unknown), ``pred``, ``pred_name`` (empty without
  class names), ``prob`` (of the predicted class), ``top_k`` (``index:probability`` pairs, most
  probable first);
* :func:`prediction_table`: the console table.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dna_video.common.atomic import atomic_path

__all__ = ["PREDICTION_COLUMNS", "top_classes", "prediction_records", "csv_rows", "write_csv", "prediction_table"]

PREDICTION_COLUMNS = ("path", "label", "pred", "pred_name", "prob", "top_k")


def top_classes(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, indices), each (N, k): the ``k`` largest of each row of (N, K) ``probs``, most
    probable first (of equal values, the lower class first)."""
    probs = np.asarray(probs)
    indices = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(probs, indices, axis=1), indices


def prediction_records(paths: Sequence[str], probs: np.ndarray, labels: Sequence[int | None],
                       names: Sequence[str], top_k: int,
                       frames: Sequence[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """One record per video of (N, K) ``probs`` (an array or a CPU tensor): ``path, label,
    pred, pred_name, prob`` and ``top_k`` as a list of ``{class, name, prob}``, most probable
    first (the JSON output); with ``frames`` ((decodable frames, frames needed) per video)
    also ``frames`` and ``frames_needed``: a video with fewer frames than needed was answered
    with frames repeated."""
    probs = np.asarray(probs, dtype=np.float32)
    values, indices = top_classes(probs, min(top_k, probs.shape[1]))
    records = []
    for i, path in enumerate(paths):
        ranked = [{"class": int(c), "name": names[int(c)], "prob": round(float(p), 6)}
                  for p, c in zip(values[i], indices[i])]
        records.append({"path": path, "label": labels[i], "pred": ranked[0]["class"], "pred_name": ranked[0]["name"],
                        "prob": ranked[0]["prob"], "top_k": ranked})
        if frames is not None:
            records[-1]["frames"], records[-1]["frames_needed"] = frames[i]
    return records


def csv_rows(paths: Sequence[str], probs: np.ndarray, labels: Sequence[int | None] | None = None,
             preds: Sequence[int] | None = None, class_names: Sequence[str] | None = None,
             top_k: int = 5) -> list[list]:
    """CSV rows (:data:`PREDICTION_COLUMNS`) of the videos ``paths`` with (N, K) ``probs``;
    ``labels`` (None entries, or None: unknown), ``preds`` (default: the most probable class)."""
    probs = np.asarray(probs, dtype=np.float32)
    values, indices = top_classes(probs, min(top_k, probs.shape[1]))
    rows = []
    for i, video in enumerate(paths):
        pred = int(preds[i]) if preds is not None else int(indices[i, 0])
        label = labels[i] if labels is not None else None
        rows.append([
            video,
            int(label) if label is not None else "",
            pred,
            class_names[pred] if class_names else "",
            f"{float(probs[i, pred]):.6f}",
            " ".join(f"{int(c)}:{float(p):.4f}" for p, c in zip(values[i], indices[i])),
        ])
    return rows


def write_csv(path: str | Path, rows: Iterable[list]) -> None:
    """The header and ``rows`` (:func:`csv_rows`) at ``path``, atomically."""
    with atomic_path(path) as partial, open(partial, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(PREDICTION_COLUMNS)
        writer.writerows(rows)


def prediction_table(records: list[dict[str, Any]]) -> str:
    """The console table of :func:`prediction_records`: one line per video, its top-k classes
    with their probabilities; a video shorter than the clip noted."""
    width = min(max((len(Path(r["path"]).name) for r in records), default=5), 48)
    lines = [f"{'video':<{width}}  top-{len(records[0]['top_k'])} (class probability)"]
    for r in records:
        text = "  ".join(f"{c['name']} {c['prob']:.3f}" for c in r["top_k"])
        if r.get("frames", 0) < r.get("frames_needed", 0):
            text += f"  (short: {r['frames']} of {r['frames_needed']} frames, repeated)"
        lines.append(f"{Path(r['path']).name[-width:]:<{width}}  {text}")
    return "\n".join(lines)
