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

Where things are: :mod:`.io` reads files, :mod:`.layouts` holds the key maps and geometry,
:mod:`.dna_init` the negative-branch policies, :mod:`.loading` the import and its report,
:mod:`.export` the Hugging Face export. ``python -m dna_video.checkpoints --help`` inspects
and exports from the command line.
"""

from .dna_init import DNA_INIT_POLICIES, init_negative_branch
from .export import export_huggingface
from .io import CheckpointError, RawCheckpoint, read_checkpoint
from .layouts import detect_layout, hf_config_to_kwargs, infer_geometry
from .loading import LoadReport, load_pretrained, timesformer_from_checkpoint

__all__ = [
    "CheckpointError",
    "DNA_INIT_POLICIES",
    "LoadReport",
    "RawCheckpoint",
    "detect_layout",
    "export_huggingface",
    "hf_config_to_kwargs",
    "infer_geometry",
    "init_negative_branch",
    "load_pretrained",
    "read_checkpoint",
    "timesformer_from_checkpoint",
]
