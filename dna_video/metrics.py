"""Mean per-class accuracy over the classes present in the targets.

torchmetrics' ``MulticlassAccuracy(average="macro")`` counts a class that is absent from the
targets but predicted as 0 accuracy, which lowers the mean. Toyota Smarthome's cross-view
validation camera lacks two of the 19 classes, so its mean class accuracy must average
only the classes that occur. This metric keeps per-class counts and does exactly that.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric

__all__ = ["MeanClassAccuracy"]


class MeanClassAccuracy(Metric):
    """mean over classes c with at least one target of (correct_c / count_c).

    ``update(preds, target)`` takes scores (N, K) (argmax taken) or class indices (N,).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_classes: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.add_state("correct", default=torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        if preds.ndim == 2:
            preds = preds.argmax(dim=1)
        target = target.long()
        self.count += torch.bincount(target, minlength=self.num_classes)
        self.correct += torch.bincount(target[preds == target], minlength=self.num_classes)

    def per_class(self) -> Tensor:
        """Accuracy of every class, NaN for classes without targets."""
        return torch.where(self.count > 0, self.correct / self.count.clamp(min=1), torch.nan)

    def compute(self) -> Tensor:
        present = self.count > 0
        if not present.any():
            return torch.tensor(torch.nan)
        return (self.correct[present] / self.count[present]).mean()
