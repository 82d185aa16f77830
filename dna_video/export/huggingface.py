"""Export of a trained TimeSformer to a Hugging Face ``save_pretrained`` folder (``config.json`` +
``model.safetensors``) that ``TimesformerForVideoClassification.from_pretrained`` reads, so a
model trained here can be shared: ``dna-video export huggingface CKPT OUT_DIR``. DnA has no
Hugging Face counterpart, so only softmax models export."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from safetensors.torch import save_file

from dna_video.checkpoints.io import CheckpointError
from dna_video.checkpoints.layouts import hf_config_from_model, official_to_hf
from dna_video.common.atomic import atomic_path, write_json
from dna_video.models.timesformer import TimeSformer

__all__ = ["export_huggingface"]


def export_huggingface(model: TimeSformer, folder: str | Path, class_names: Sequence[str] | None = None) -> Path:
    """Write ``model`` to ``folder`` in the Hugging Face TimeSformer layout; returns the folder.

    ``class_names`` (in label order) become the config's ``id2label``.
    """
    if model.attention != "softmax":
        raise CheckpointError(
            f"only softmax TimeSformers export to Hugging Face (this one uses {model.attention!r} attention)"
        )
    if model.num_classes == 0:
        raise CheckpointError("the model has no classification head (num_classes=0); nothing to export as a classifier")
    if class_names is not None and len(class_names) != model.num_classes:
        raise ValueError(f"{len(class_names)} class names for a {model.num_classes}-class model")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    id2label = dict(enumerate(class_names)) if class_names is not None else None
    config = hf_config_from_model(model, id2label)
    state = {k: v.detach().cpu().contiguous() for k, v in official_to_hf(model.state_dict()).items()}
    # The weights first: a folder never holds a new config.json beside an old model's weights.
    with atomic_path(folder / "model.safetensors") as partial:
        save_file(state, partial, metadata={"format": "pt"})  # transformers refuses it without this metadata
    write_json(folder / "config.json", config, indent=2)
    return folder
