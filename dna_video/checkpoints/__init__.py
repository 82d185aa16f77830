"""Checkpoints: import any supported layout into a TimeSformer, fine-tuning adaptations.

Supported sources (all into both the softmax and the DnA model):

* ImageNet ViT state dicts in timm layout (``.pth`` / ``.bin`` / ``.safetensors``);
* official TimeSformer ``.pyth`` (``model_state``, ``model.`` prefix) and plain dicts, or
  dicts under ``state_dict`` / ``model`` / ``module``;
* DnA reference checkpoints (TimeSformer layout plus ``q_neg``, ``v_neg``, ``neg_scalers``) and
  DnA-ViT checkpoints with the fused ``qqkvv``;
* Hugging Face ``TimesformerForVideoClassification`` (``save_pretrained`` folder or a state
  dict), with the model geometry from its ``config.json``;
* this project's Lightning checkpoints.

Where things are: :mod:`.io` reads files; :mod:`.layouts` holds the key maps, the
architecture facts and the geometry; :mod:`.conversion` the pure conversion (checkpoint +
target model -> state dict + report); :mod:`.outcomes` / :mod:`.load_report` the report as data;
:mod:`.loading` the import (conversion, ``load_state_dict``, initialisations the report calls
for); :mod:`dna_video.models.attention.negative_init` the negative-branch policies.
``dna-video checkpoints --help`` inspects a checkpoint from the command line. Writing a trained
model for others (Hugging Face, the reference's ``.pyth``, ONNX, ``torch.export``) is
:mod:`dna_video.export` (``dna-video export``), a layer above this one.

``export_huggingface`` and ``export_reference``, exported here until 0.3, still resolve for one
release, with a DeprecationWarning: this package imports nothing of :mod:`dna_video.export`
(it sits above), so they are looked up by name when asked for (:func:`__getattr__`).
"""

import importlib
import warnings

from dna_video.checkpoints.conversion import TargetModel, convert_checkpoint
from dna_video.models.attention.negative_init import DNA_INIT_POLICIES, init_negative_branch
from dna_video.checkpoints.io import CheckpointError, RawCheckpoint, read_checkpoint
from dna_video.checkpoints.layouts import detect_layout, hf_config_to_kwargs, infer_geometry
from dna_video.checkpoints.loading import PretrainedWeights, initialise_missing, load_image_checkpoint, load_pretrained, load_weights, read_official, timesformer_from_checkpoint
from dna_video.checkpoints.outcomes import Entry, Outcome, Reason, Step
from dna_video.checkpoints.load_report import LoadReport

__all__ = [
    "CheckpointError",
    "DNA_INIT_POLICIES",
    "Entry",
    "LoadReport",
    "Outcome",
    "PretrainedWeights",
    "RawCheckpoint",
    "Reason",
    "Step",
    "TargetModel",
    "convert_checkpoint",
    "detect_layout",
    "hf_config_to_kwargs",
    "infer_geometry",
    "init_negative_branch",
    "initialise_missing",
    "load_image_checkpoint",
    "load_pretrained",
    "load_weights",
    "read_checkpoint",
    "read_official",
    "timesformer_from_checkpoint",
]

# 0.2 names that moved to dna_video.export in 0.3: name -> its module there.
_MOVED_TO_EXPORT = {"export_huggingface": "dna_video.export.huggingface", "export_reference": "dna_video.export.reference"}


def __getattr__(name: str):
    if name == "ImportOptions":  # PretrainedWeights since 0.3 (dna_video.checkpoints.conversion warns)
        from dna_video.checkpoints import conversion

        return conversion.ImportOptions
    if name not in _MOVED_TO_EXPORT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to {_MOVED_TO_EXPORT[name]} in dna-video 0.3; the old path goes in 0.4",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MOVED_TO_EXPORT[name]), name)
