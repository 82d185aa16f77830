"""Checkpoints: import any supported layout into a TimeSformer, fine-tuning adaptations, export.

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
for); :mod:`dna_video.models.attention.negative_init` the negative-branch policies; :mod:`.export` the Hugging Face and
reference TimeSformer exports; :mod:`.deploy` the ONNX and ``torch.export`` files to deploy
(``dna-video export``). ``dna-video checkpoints --help`` inspects and exports
from the command line.
"""

from dna_video.checkpoints.conversion import TargetModel, convert_checkpoint
from dna_video.models.attention.negative_init import DNA_INIT_POLICIES, init_negative_branch
from dna_video.checkpoints.export import export_huggingface, export_reference
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
    "export_huggingface",
    "export_reference",
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


def __getattr__(name: str):
    # 0.2's ImportOptions: PretrainedWeights since 0.3 (dna_video.checkpoints.conversion warns).
    if name == "ImportOptions":
        from dna_video.checkpoints import conversion

        return conversion.ImportOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
