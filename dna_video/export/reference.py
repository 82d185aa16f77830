"""Export of a trained TimeSformer to the reference TimeSformer's own checkpoint file (``.pyth``:
``model_state`` with every key under ``model.``, ``epoch``, ``cfg``), softmax or DnA, so that
results can be checked with the authors' code: ``dna-video export reference CKPT OUT.pyth``."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from dna_video.checkpoints.conversion import TargetModel
from dna_video.checkpoints.io import CheckpointError
from dna_video.checkpoints.layouts import official_to_reference
from dna_video.common.atomic import atomic_path
from dna_video.models.attention import attention_kind, attention_kinds
from dna_video.models.timesformer import TimeSformer

__all__ = ["export_reference", "reference_attentions", "reference_cfg"]


def reference_attentions() -> list[str]:
    """Attention kinds the reference TimeSformer has (the official one and the DnA fork's), as
    the registry declares them (``AttentionKind.in_reference``)."""
    return [name for name in attention_kinds() if attention_kind(name).in_reference]


def reference_cfg(model: TimeSformer) -> str:
    """The ``cfg`` entry of a reference checkpoint: the official config's fields that describe
    ``model`` (its YAML dump), with our full model description as a comment."""
    fields = {
        "DATA": {"NUM_FRAMES": model.num_frames, "TRAIN_CROP_SIZE": model.img_size, "TEST_CROP_SIZE": model.img_size},
        "MODEL": {"ARCH": "vit", "NUM_CLASSES": model.num_classes},
        "TIMESFORMER": {"ATTENTION_TYPE": "divided_space_time"},
    }
    return f"# exported by dna-video: {TargetModel.of(model).description}\n" + yaml.safe_dump(fields, sort_keys=False)


def export_reference(model: TimeSformer, path: str | Path, epoch: int = 0) -> Path:
    """Write ``model`` (softmax or DnA) to ``path`` as the reference TimeSformer's checkpoint
    file: ``{"model_state": {"model.<official name>": tensor}, "epoch": epoch, "cfg": YAML}``.
    Returns the path."""
    if model.attention not in reference_attentions():
        raise CheckpointError(
            f"the reference TimeSformer has {' and '.join(reference_attentions())} attention, not {model.attention!r}"
        )
    if model.num_classes == 0:
        raise CheckpointError("the model has no classification head (num_classes=0); the reference loads a head")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in official_to_reference(model.state_dict()).items()}
    with atomic_path(path) as partial:
        torch.save({"model_state": state, "epoch": epoch, "cfg": reference_cfg(model)}, partial)
    return path
