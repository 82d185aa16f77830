"""The measures of one finished run, on its final checkpoint (last epoch; no selection):

* per held-out set: top-1; on the cue-conflicting videos (the distractor's motion points to a
  wrong label) top-1 and the rate at which the prediction IS the label the cue points to; where
  every prediction goes (:func:`set_metrics`: the true class, the cue's label, the distractor's
  OWN motion class, another), the distractor confusion among them; every video's prediction
  (the record, so that all of it can be recounted from the data's labels and ``cues.json``);
* on the shifted set: top-1 and distractor confusion with the negative branch switched off
  (kinds that have one);
* on a fixed subset of the shifted set (the first ``map_videos``), the mechanism per spatial
  block and head (:func:`dna_video.analysis.denoising.measure_mechanism`): attention mass on actor /
  distractors / background relative to their area, per map; the correlation of the positive
  and negative maps; cos(q+, -q-) of the cls query; the negative branch's output norm over the
  positive one's. The CSV row holds their means over blocks and heads; ``details`` all of it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from experiments.denoising.design import QUICK, Cell
from experiments.denoising.runs import Layout, final_checkpoint

__all__ = ["measure", "set_metrics"]


def set_metrics(probs: torch.Tensor, labels: torch.Tensor, cue_labels: torch.Tensor | None) -> dict:
    """top-1; on the videos whose cue points to another label (cue-conflicting): top-1 and the
    share of predictions equal to the cue's label. Fractions in [0, 1]; None where undefined.

    With cue labels, where each prediction goes, a partition of the videos (``outcomes``, counts):
    ``true`` (the label), ``cue`` (the label the cue points to, when that is not the label),
    ``distractor`` (the distractor's own motion class pi(cue), :func:`~dna_video.data.scenes.cue_motion`,
    when that is not the label) and ``other``. The cue's label and the distractor's class never
    coincide (pi is a derangement); the distractor's class IS the label where the cue points to
    pi^-1(label) (``distractor_is_label`` videos: a quarter of a fully conflicting set), and those
    predictions count as ``true``. ``distractor_confusion``: the share of ALL the set's videos
    predicted as the distractor's class when it is not the label (the model took the
    distractor's motion for the actor's); ``predicted``: every video's class, one digit each."""
    from dna_video.data.scenes import cue_motion

    predicted = probs.argmax(dim=1)
    classes = probs.shape[1]
    if classes > 10:
        raise ValueError(f"set_metrics: {classes} classes; the record writes one digit per prediction (at most 10)")
    correct = predicted == labels
    out = {"top1": float(correct.double().mean()), "videos": int(len(labels)),
           "predicted": "".join(str(p) for p in predicted.tolist())}
    if cue_labels is None:
        return out | {"conflict_top1": None, "cue_follow": None, "conflicting": 0, "distractor_confusion": None}
    conflicting = cue_labels != labels
    count = int(conflicting.sum())
    out["conflicting"] = count
    if count:
        out["conflict_top1"] = float((predicted[conflicting] == labels[conflicting]).double().mean())
        out["cue_follow"] = float((predicted[conflicting] == cue_labels[conflicting]).double().mean())
    else:
        out["conflict_top1"] = out["cue_follow"] = None
    distractor = cue_motion(cue_labels, classes)
    to_cue = (predicted == cue_labels) & conflicting
    to_distractor = (predicted == distractor) & (distractor != labels)
    out["outcomes"] = {"true": int(correct.sum()), "cue": int(to_cue.sum()), "distractor": int(to_distractor.sum()),
                       "other": int((~(correct | to_cue | to_distractor)).sum())}
    out["distractor_is_label"] = int((distractor == labels).sum())
    out["distractor_confusion"] = float(to_distractor.double().mean())
    return out


def predict(net: torch.nn.Module, loader) -> dict[str, torch.Tensor]:
    """Per test video (in the split's record order): ``probs`` (softmax of the mean view
    logits) and ``labels``; ``loader``: its batches (a loader or a list of them)."""
    from einops import rearrange, reduce

    probs, labels, order = [], [], []
    for batch in loader:
        if batch["video"] is None:
            continue
        video = batch["video"]
        logits = net(rearrange(video, "b v c t h w -> (b v) c t h w"))
        probs.append(reduce(logits, "(b v) k -> b k", "mean", b=video.shape[0]).softmax(dim=-1))
        labels.append(batch["label"])
        order.append(batch["index"])
    position = torch.cat(order).argsort()
    return {"probs": torch.cat(probs)[position], "labels": torch.cat(labels)[position], "index": torch.cat(order)[position]}


@dataclass(frozen=True)
class _TestSet:
    """A held-out set as the measures read it: its batches (decoded and transformed once), the
    file names of its records in order, and their cue labels (level ``cue``; else None)."""

    batches: list[dict]
    names: list[str]
    cues: torch.Tensor | None


#: Test sets already read in this process, by their DataModule arguments (the training data's
#: ``data_seed`` aside: it draws the training order and augmentation only). Every run of a grid
#: is measured on the same videos; decoding them was half of a run's measuring time. About 0.5 GB
#: per 2,000 videos of 8 x 48 x 48.
_TEST_SETS: dict[str, _TestSet] = {}


def _test_set(saved: dict, options: dict, **extra) -> _TestSet:
    import json

    from dna_video.data.distractors import SyntheticDistractors

    args = {k: v for k, v in saved.items() if not k.startswith("_")}  # LightningCLI's own entries
    args.update(options, num_workers=0, cache_decoded=False, **extra)
    key = json.dumps({k: v for k, v in args.items() if k != "data_seed"}, sort_keys=True, default=str)
    if key not in _TEST_SETS:
        datamodule = SyntheticDistractors(**args)
        datamodule.setup("test")
        batches = [batch for batch in datamodule.test_dataloader() if batch["video"] is not None]
        names = [Path(record.path).name for record in datamodule.datasets["test"].records]
        cues = torch.tensor(datamodule.cue_labels("test")) if datamodule.scene["level"] == "cue" else None
        _TEST_SETS[key] = _TestSet(batches, names, cues)
    return _TEST_SETS[key]


def _listed(value):
    """Tensors as nested lists (NaN as None), for JSON."""
    if isinstance(value, torch.Tensor):
        return _listed(value.tolist())
    if isinstance(value, dict):
        return {k: _listed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_listed(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def _mean(value: torch.Tensor) -> float | None:
    """The mean over blocks and heads, NaN entries left out; None when none is defined."""
    finite = value[~value.isnan()]
    return float(finite.mean()) if finite.numel() else None


def mechanism_summary(found: dict) -> dict:
    """The CSV's columns from :func:`~dna_video.analysis.denoising.measure_mechanism`: means
    over blocks and heads (one-map kinds: their map counts as the positive one)."""
    relative = found["mass_relative"]
    positive = relative.get("positive", relative.get("softmax"))
    row = {}
    for branch, values in (("positive", positive), ("negative", relative.get("negative"))):
        for index, region in ((0, "actor"), (1, "distractors")):
            row[f"mass_ratio_{branch}_{region}"] = None if values is None else _mean(values[..., index])
    for column, key in (("map_correlation", "map_correlation"), ("cos_q_pos_neg", "query_cosine"),
                        ("negative_output_ratio", "output_norm_ratio")):
        row[column] = _mean(found[key]) if key in found else None
    return row


@torch.no_grad()
def measure(cell: Cell, layout: Layout) -> dict:
    """The CSV row (``row``) and the per-block, per-head details (``details``) of ``cell``."""
    from dna_video.analysis.denoising import has_negative_branch, measure_mechanism, negative_branch_off
    from dna_video.prediction.torch_backend import load_model

    checkpoint = final_checkpoint(cell.folder(layout.runs))
    loaded = load_model(checkpoint, warn_defaults=False)
    net = loaded.net.eval()
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)["datamodule_hyper_parameters"]
    row: dict = {"group": cell.group, "variant": cell.variant, "dna_init": cell.dna_init, "seed": cell.seed,
                 "task": cell.task, "start": cell.start.name if cell.start else "-", "epochs": layout.epochs(cell)}
    details: dict = {"checkpoint": str(checkpoint), "sets": {}}
    for name in layout.sets_of(cell):
        test_set = _test_set(saved, layout.set_args(name))
        result = predict(net, test_set.batches)
        if result["index"].tolist() != list(range(len(test_set.names))):
            raise RuntimeError(f"{name}: {len(result['index'])} of the test split's {len(test_set.names)} videos "
                               "were predicted")
        cues = test_set.cues
        metrics = set_metrics(result["probs"], result["labels"], cues)
        # ``predicted`` follows the split's records: their file names' digest lets a reader
        # match every digit to its video (and its label and cue, from the name and cues.json).
        metrics["order_sha256"] = hashlib.sha256("\n".join(test_set.names).encode()).hexdigest()
        details["sets"][name] = metrics
        column = "calibration" if name.startswith("calibrate") else name
        for key in ("top1", "conflict_top1", "cue_follow", "distractor_confusion"):
            row[f"{column}_{key}"] = metrics[key]
        if name == "shifted" and has_negative_branch(net):
            with negative_branch_off(net):
                off = predict(net, test_set.batches)
            metrics_off = set_metrics(off["probs"], off["labels"], cues)
            details["sets"][f"{name}_negative_off"] = metrics_off
            row["shifted_top1_negative_off"] = metrics_off["top1"]
            row["shifted_distractor_confusion_negative_off"] = metrics_off["distractor_confusion"]
    if "shifted" in layout.sets_of(cell):
        videos = QUICK["map_videos"] if layout.quick else int(layout.plan["map_videos"])
        found = measure_mechanism(net, _test_set(saved, layout.set_args("shifted"), with_masks=True,
                                                 test_subset=videos).batches)
        details["mechanism"] = _listed({k: v for k, v in found.items() if k not in ("probs", "labels")})
        row.update(mechanism_summary(found))
    return {"row": row, "details": details}
