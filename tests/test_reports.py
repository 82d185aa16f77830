"""Evaluation report metrics against hand counts and straightforward independent computations:
RMS calibration error (adaptive bins of 100), AURRA, per-class accuracy, confusion counts,
top-k, ECE (vs torchmetrics' own metric object), and the mean-of-views probabilities they are
computed on."""

import math

import pytest
import torch
from torchmetrics.classification import MulticlassCalibrationError

from dna_video.analysis.evaluation_report import aurra, evaluation_report, rms_calibration_error
from dna_video.tasks.views import mean_view_probs


def test_rms_calibration_error_by_hand():
    # Sorted by confidence: 0.6 (wrong), 0.7 (right) | 0.8 (right), 0.9 (right), 0.95 (wrong);
    # bins of 2 from the low end, the fifth video joins the last bin.
    confidence = torch.tensor([0.9, 0.6, 0.8, 0.7, 0.95])
    correct = torch.tensor([1.0, 0, 1, 1, 0])
    first = (0.65 - 0.5) ** 2  # mean confidence 0.65, accuracy 1/2
    last = ((0.8 + 0.9 + 0.95) / 3 - 2 / 3) ** 2
    expected = math.sqrt(2 / 5 * first + 3 / 5 * last)  # = 0.192787...
    assert rms_calibration_error(confidence, correct, bin_size=2) == pytest.approx(expected)
    assert expected == pytest.approx(0.192787, abs=1e-6)
    # Fewer videos than a bin: one bin, |mean confidence - accuracy|.
    assert rms_calibration_error(confidence, correct) == pytest.approx(abs(confidence.mean().item() - 0.6))


def reference_rms(confidence, correct, beta=100):
    """Written independently: sort ascending, cut [0, beta), [beta, 2 beta)... with the
    remainder in the last bin, and count every bin."""
    pairs = sorted(zip(confidence.tolist(), correct.tolist()), key=lambda p: p[0])
    n = len(pairs)
    edges = list(range(0, n, beta))
    if len(edges) > 1 and n - edges[-1] < beta:
        edges.pop()  # the remainder joins the bin before
    edges.append(n)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        chunk = pairs[lo:hi]
        conf = sum(c for c, _ in chunk) / len(chunk)
        acc = sum(k for _, k in chunk) / len(chunk)
        total += len(chunk) / n * (conf - acc) ** 2
    return math.sqrt(total)


def reference_aurra(confidence, correct):
    ranked = sorted(range(len(confidence)), key=lambda i: -confidence[i].item())
    accuracies = []
    for r in range(1, len(ranked) + 1):
        accuracies.append(sum(correct[i].item() for i in ranked[:r]) / r)
    return sum(accuracies) / len(accuracies)


@pytest.mark.parametrize("n", [57, 100, 250, 537])
def test_rms_and_aurra_equal_an_independent_computation(n):
    gen = torch.Generator().manual_seed(n)
    confidence = torch.rand(n, generator=gen, dtype=torch.float64)  # distinct values
    correct = (torch.rand(n, generator=gen) < confidence).double()
    assert rms_calibration_error(confidence, correct) == pytest.approx(reference_rms(confidence, correct), rel=1e-9)
    assert aurra(confidence, correct) == pytest.approx(reference_aurra(confidence, correct), rel=1e-9)


def test_aurra_by_hand():
    # Most confident first: right, wrong, right, wrong -> accuracies 1, 1/2, 2/3, 1/2.
    confidence = torch.tensor([0.9, 0.6, 0.8, 0.7])
    correct = torch.tensor([1.0, 0, 0, 1])
    assert aurra(confidence, correct) == pytest.approx((1 + 0.5 + 2 / 3 + 0.5) / 4)


# Six videos, four classes (class 3 never a true class). Rows: probabilities.
PROBS = torch.tensor([
    [0.7, 0.1, 0.1, 0.1],  # label 0, pred 0
    [0.2, 0.5, 0.2, 0.1],  # label 0, pred 1
    [0.1, 0.6, 0.2, 0.1],  # label 1, pred 1
    [0.1, 0.2, 0.3, 0.4],  # label 2, pred 3 (2 second)
    [0.05, 0.05, 0.8, 0.1],  # label 2, pred 2
    [0.3, 0.25, 0.25, 0.2],  # label 2, pred 0 (2 third)
])
LABELS = torch.tensor([0, 0, 1, 2, 2, 2])
NAMES = ["Walk", "Sit", "Drink", "Eat"]


def test_evaluation_report_against_hand_counts():
    report = evaluation_report(PROBS, LABELS, NAMES)
    assert report["num_videos"] == 6 and report["class_names"] == NAMES
    assert report["top1"] == pytest.approx(3 / 6)
    # top-5 with 4 classes: every video is right.
    assert report["top5"] == pytest.approx(1.0)
    assert report["per_class_accuracy"] == pytest.approx({"Walk": 1 / 2, "Sit": 1.0, "Drink": 1 / 3, "Eat": None})
    assert report["per_class_count"] == {"Walk": 2, "Sit": 1, "Drink": 3, "Eat": 0}
    assert report["mca"] == pytest.approx((1 / 2 + 1 + 1 / 3) / 3)  # classes present only
    assert report["confusion_matrix"] == [[1, 1, 0, 0], [0, 1, 0, 0], [1, 0, 1, 1], [0, 0, 0, 0]]
    ece = MulticlassCalibrationError(num_classes=4, n_bins=15, norm="l1")
    ece.update(PROBS, LABELS)
    assert report["ece"] == pytest.approx(ece.compute().item())
    confidence = PROBS.max(1).values
    correct = (PROBS.argmax(1) == LABELS).double()
    assert report["rms_calibration_error"] == pytest.approx(abs(confidence.mean().item() - 0.5))  # one bin
    assert report["aurra"] == pytest.approx(reference_aurra(confidence, correct))
    # ECE by hand too: 15 equal bins over (0, 1]; confidences 0.7, 0.5, 0.6, 0.4, 0.8, 0.3 each in its own bin.
    assert report["ece"] == pytest.approx(float((confidence - correct).abs().mean()), abs=1e-6)


def test_report_top5_by_hand_with_more_classes():
    probs = torch.softmax(torch.arange(8.0).repeat(3, 1), dim=1)  # class 7 most likely, then 6...
    labels = torch.tensor([7, 3, 2])  # ranks 1, 5, 6
    report = evaluation_report(probs, labels)
    assert report["top1"] == pytest.approx(1 / 3) and report["top5"] == pytest.approx(2 / 3)
    assert report["class_names"] == [str(i) for i in range(8)]


def test_mean_view_probs_are_those_of_the_mean_never_of_the_sum():
    logits = torch.tensor([[[2.0, 0.0, -1.0], [1.0, 1.0, 0.0], [3.0, -1.0, 0.0]]])  # 1 video, 3 views
    by_logits = mean_view_probs(logits, "logits")
    torch.testing.assert_close(by_logits, torch.softmax(logits.mean(1), -1))
    summed = torch.softmax(logits.sum(1), -1)
    assert summed.max() > by_logits.max() + 0.05  # a sum of 3 views sharpens: not what is reported
    torch.testing.assert_close(mean_view_probs(logits, "probs"), torch.softmax(logits, -1).mean(1))
    with pytest.raises(ValueError, match="aggregation"):
        mean_view_probs(logits, "sum")
