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

__all__ = ["MeanClassAccuracy", "class_accuracies", "mean_class_accuracy"]


def class_accuracies(correct: Tensor, count: Tensor) -> Tensor:
    """Accuracy of every class from per-class hit and video counts, NaN for classes without videos."""
    return torch.where(count > 0, correct / count.clamp(min=1), torch.nan)


def mean_class_accuracy(correct: Tensor, count: Tensor) -> Tensor:
    """The mean of :func:`class_accuracies` over the classes with at least one video (NaN when
    there is none): the one definition of mean class accuracy, for the metric logged in
    training and for the evaluation reports."""
    present = count > 0
    if not present.any():
        return torch.tensor(torch.nan)
    return (correct[present].double() / count[present]).mean()


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
        return class_accuracies(self.correct, self.count)

    def compute(self) -> Tensor:
        return mean_class_accuracy(self.correct, self.count).float()
