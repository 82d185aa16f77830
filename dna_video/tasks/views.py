"""Per-video predictions from the views of each video (clips x crops): the scores the metrics
rank, and the class probabilities a prediction file or a calibration reads."""

from __future__ import annotations

from torch import Tensor

__all__ = ["aggregate_views", "mean_view_probs"]


def aggregate_views(logits: Tensor, how: str = "sum", on: str = "logits") -> Tensor:
    """Combine per-view predictions (B, V, K) into one score per video (B, K), the scores
    the metrics rank.

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


def mean_view_probs(logits: Tensor, on: str = "logits") -> Tensor:
    """Class probabilities (B, K) of the mean of the views of per-view logits (B, V, K):
    the softmax of the mean logits (``on="logits"``) or the mean of the views' softmax
    (``on="probs"``). Never the softmax of summed logits, which grows sharper with every
    view added and so is over-confident (what calibration and confidence ranking read)."""
    if on == "logits":
        return logits.mean(dim=1).softmax(dim=-1)
    if on == "probs":
        return logits.softmax(dim=-1).mean(dim=1)
    raise ValueError(f"unknown aggregation input {on!r}: use logits or probs")
