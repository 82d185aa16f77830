"""Per-video predictions from the views of each video (clips x crops): the scores the metrics
rank, and the class probabilities a prediction file or a calibration reads.

No torch at import: the functions take torch tensors (training, evaluation: on their device,
autograd kept) or numpy arrays (``predict`` with a checkpoint or an ``.onnx`` model) and answer
in the same kind.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["aggregate_views", "mean_view_probs", "softmax"]


def aggregate_views(logits: Any, how: str = "sum", on: str = "logits") -> Any:
    """Combine per-view predictions (B, V, K), a torch tensor, into one score per video (B, K),
    the scores the metrics rank.

    ``how``: ``sum``, ``mean`` or ``max`` over the V views; ``on``: combine raw ``logits``
    or softmax ``probs``.
    """
    scores = logits.softmax(dim=-1) if on == "probs" else logits
    if how == "sum":
        return scores.sum(dim=1)
    if how == "mean":
        return scores.mean(dim=1)
    if how == "max":
        return scores.amax(dim=1)
    raise ValueError(f"unknown view aggregation {how!r}: use sum, mean or max")


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of a numpy array along ``axis``, in float32, the maximum subtracted first."""
    logits = np.asarray(logits, np.float32)
    exp = np.exp(logits - np.max(logits, axis=axis, keepdims=True))
    return exp / exp.sum(axis=axis, keepdims=True)


def mean_view_probs(logits: Any, on: str = "logits") -> Any:
    """Class probabilities (B, K) of the mean of the views of per-view logits (B, V, K):
    the softmax of the mean logits (``on="logits"``) or the mean of the views' softmax
    (``on="probs"``). Never the softmax of summed logits, which grows sharper with every
    view added and so is over-confident (what calibration and confidence ranking read).

    A torch tensor is answered as a tensor (its own operations: device and autograd kept),
    anything else as a float32 numpy array."""
    if on not in ("logits", "probs"):
        raise ValueError(f"unknown aggregation input {on!r}: use logits or probs")
    torch = sys.modules.get("torch")  # a tensor means torch is imported: never imported here
    if torch is not None and isinstance(logits, torch.Tensor):
        if on == "logits":
            return logits.mean(dim=1).softmax(dim=-1)
        return logits.softmax(dim=-1).mean(dim=1)
    logits = np.asarray(logits, np.float32)
    if on == "logits":
        return softmax(logits.mean(axis=1))
    return softmax(logits).mean(axis=1)
