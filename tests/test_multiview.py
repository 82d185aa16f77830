"""Multi-view evaluation: batch shapes and view order from real files, per-video
aggregation of views (sum / mean / max of logits / probabilities), the probabilities of the
mean view that predict reports, and the mean class accuracy over the classes present,
against hand-computed values."""

import math

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader
from torchmetrics.classification import MulticlassAccuracy

from dna_video.data import ToyotaSmarthome
from dna_video.tasks.metrics import MeanClassAccuracy
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.video import Evaluation, VideoClassifier
from dna_video.tasks.views import aggregate_views, mean_view_probs


def test_test_batches_hold_every_view_of_each_video_clip_major(smarthome_tree):
    root, _ = smarthome_tree
    dm = ToyotaSmarthome(
        str(root), protocol="cv1", num_workers=0, batch_size=3, num_frames=4, sampling_rate=2, target_fps=None,
        train_short_side=(32, 40), crop_size=32, test_num_clips=2, test_num_crops=3, mean=(0, 0, 0), std=(1, 1, 1),
    )
    dm.setup("test")
    batch = next(iter(dm.test_dataloader()))
    # (videos, clips x crops, C, T, H, W)
    assert batch["video"].shape == (3, 6, 3, 4, 32, 32) and batch["label"].shape == (3,)
    # The mini-tree videos brighten from left to right and over time (video_trees.clip_frames):
    # views k * 3 + s are clip k (0: frames 0,2,4,6; 1: frames 4,6,8,10) and crop s (left,
    # centre, right).
    brightness = batch["video"].mean(dim=(2, 3, 4, 5))  # (3, 6)
    for v in brightness:
        for k in range(2):
            left, centre, right = v[3 * k: 3 * k + 3]
            assert left < centre < right
        assert (v[3:] > v[:3] + 0.05).all()  # the second clip is later in the video


# Per-view logits (2 videos a batch, 2 batches, 2 views, 4 classes) and the targets. Class 3
# is predicted by some aggregations but absent from the targets, like the two classes
# camera 5 lacks in Smarthome's cross-view validation.
VIEWS = torch.tensor(
    [
        [[4.0, 0, 0, 0], [0, 5.2, 5, 5]],  # video A, label 0
        [[0, 1.0, 0, 0], [0, 2.0, 0, 0]],  # video B, label 1
        [[0, 0, 1.0, 3], [0, 0, 2.5, 0]],  # video C, label 2
        [[0, 0, 5.0, 0], [0, 0, 5.0, 0]],  # video D, label 2
    ]
)
TARGETS = torch.tensor([0, 1, 2, 2])
# Hand-computed predictions per video (A, B, C, D):
#   logits: sum/mean A [4, 5.2, 5, 5] -> 1, C [0, 0, 3.5, 3] -> 2; max A -> 1, C [0, 0, 2.5, 3] -> 3
#   probs: softmax([0, 5.2, 5, 5]) = [.002, .378, .310, .310], softmax([4, 0, 0, 0]) = [.948, .017 ...]
#          sum A -> 0; C [.106, .106, .912, .876] -> 2; max A -> 0, C [.066, .066, .802, .810] -> 3
# top-1 = correct / 4; mca = mean over classes 0, 1, 2 of correct / count.
EXPECTED = {
    ("sum", "logits"): (3 / 4, (0 + 1 + 1) / 3),
    ("mean", "logits"): (3 / 4, (0 + 1 + 1) / 3),
    ("max", "logits"): (2 / 4, (0 + 1 + 0.5) / 3),
    ("sum", "probs"): (4 / 4, 1.0),
    ("mean", "probs"): (4 / 4, 1.0),
    ("max", "probs"): (3 / 4, (1 + 1 + 0.5) / 3),
}


@pytest.mark.parametrize("how, on", list(EXPECTED))
def test_views_are_combined_per_video_and_mca_averages_present_classes(how, on):
    model = VideoClassifier(num_classes=4, num_frames=1, img_size=16,
                            evaluation=Evaluation(view_aggregation=how, aggregate=on),
                            network=TimeSformerSpec(arch="tiny", embed_dim=16, num_heads=1, depth=1, patch_size=16))
    # The network's output is the video tensor itself: (B*V, 1, 1, 1, K) -> logits (B*V, K).
    model.net.forward = lambda x: x.flatten(1)
    videos = VIEWS[:, :, None, None, None, :]  # (B, V, C, T, H, W) with C = T = H = 1, W = K
    batches = [
        {"video": videos[i: i + 2], "label": TARGETS[i: i + 2], "failed": 0, "failed_paths": []} for i in (0, 2)
    ]
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(model, dataloaders=DataLoader(batches, batch_size=None))
    top1, mca = EXPECTED[how, on]
    assert trainer.callback_metrics["val/top1"].item() == pytest.approx(top1)
    assert trainer.callback_metrics["val/mca"].item() == pytest.approx(mca)


def test_mca_differs_from_torchmetrics_macro_when_a_class_is_absent():
    preds = torch.tensor([1, 1, 3, 2])  # the max-of-logits predictions above
    ours = MeanClassAccuracy(4)
    ours.update(preds, TARGETS)
    macro = MulticlassAccuracy(4, average="macro")
    macro.update(preds, TARGETS)
    assert ours.compute().item() == pytest.approx(0.5)  # (0 + 1 + 1/2) / 3
    assert macro.compute().item() == pytest.approx(0.375)  # class 3 counted as 0: (0 + 1 + 1/2 + 0) / 4


def _softmax(xs):
    exps = [math.exp(x) for x in xs]
    return [e / sum(exps) for e in exps]


# What predict reports per video: the class the metrics count (the predictions of the table
# above), and the probabilities of the MEAN of the views, by hand: softmax of the mean logits,
# or mean of the views' softmax.
PREDS = {"logits": {"sum": [1, 1, 2, 2], "mean": [1, 1, 2, 2], "max": [1, 1, 3, 2]},
         "probs": {"sum": [0, 1, 2, 2], "mean": [0, 1, 2, 2], "max": [0, 1, 3, 2]}}


@pytest.mark.parametrize("how, on", list(EXPECTED))
def test_predictions_report_the_mean_views_probabilities(how, on):
    model = VideoClassifier(num_classes=4, num_frames=1, img_size=16,
                            evaluation=Evaluation(view_aggregation=how, aggregate=on),
                            network=TimeSformerSpec(arch="tiny", embed_dim=16, num_heads=1, depth=1, patch_size=16))
    model.net.forward = lambda x: x.flatten(1)
    videos = VIEWS[:, :, None, None, None, :]
    batches = [{"video": videos[i: i + 2], "label": TARGETS[i: i + 2], "path": [f"v{i}.mp4", f"v{i + 1}.mp4"],
                "failed": 0, "failed_paths": []} for i in (0, 2)]
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    outputs = trainer.predict(model, dataloaders=DataLoader(batches, batch_size=None))
    assert [p for out in outputs for p in out["path"]] == ["v0.mp4", "v1.mp4", "v2.mp4", "v3.mp4"]
    assert torch.cat([out["label"] for out in outputs]).tolist() == TARGETS.tolist()
    assert torch.cat([out["pred"] for out in outputs]).tolist() == PREDS[on][how]
    probs = torch.cat([out["probs"] for out in outputs])
    for video, views in enumerate(VIEWS.tolist()):
        if on == "logits":
            expected = _softmax([sum(column) / len(views) for column in zip(*views)])
        else:
            expected = [sum(column) / len(views) for column in zip(*[_softmax(v) for v in views])]
        assert probs[video].tolist() == pytest.approx(expected, abs=1e-6)


def test_mean_view_probs_is_not_the_softmax_of_summed_logits():
    logits = VIEWS[:1]  # video A: [4, 0, 0, 0] and [0, 5.2, 5, 5]
    # softmax([2, 2.6, 2.5, 2.5]) by hand
    assert mean_view_probs(logits)[0].tolist() == pytest.approx(_softmax([2.0, 2.6, 2.5, 2.5]), abs=1e-6)
    # Video D, two identical views [0, 0, 5, 0]: the mean view is that view, p = e^5 / (e^5 + 3);
    # the softmax of the sum would report e^10 / (e^10 + 3), as if two views were more certain.
    same = VIEWS[3:4]
    assert mean_view_probs(same)[0, 2].item() == pytest.approx(math.exp(5) / (math.exp(5) + 3))
    assert aggregate_views(same, "sum", "logits").softmax(-1)[0, 2].item() == pytest.approx(math.exp(10) / (math.exp(10) + 3))
    with pytest.raises(ValueError, match="logits or probs"):
        mean_view_probs(logits, on="scores")
