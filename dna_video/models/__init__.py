"""The networks: plain ``nn.Module``s that know nothing of Lightning, datasets, checkpoints or
the command line.

* :mod:`.attention`: the attention interface, the one DnA core, the kinds, cross-attention and
  the registry (:func:`~.attention.register_attention`);
* :mod:`.timesformer`: the divided space-time TimeSformer (official parameter names);
* :mod:`.vit`: timm's VisionTransformer with our attention (timm model names registered);
* :mod:`.probe`: learned probes over a frozen TimeSformer; :mod:`.mlp`, :mod:`.init`,
  :mod:`.flops` (the cost of one view).
"""

from dna_video.models.attention import Attention, AttentionKind, attention_kinds, build_attention, register_attention
from dna_video.models.probe import ProbeClassifier
from dna_video.models.timesformer import PRESETS, TimeSformer, timesformer
from dna_video.models.vit import vision_transformer

__all__ = [
    "Attention", "AttentionKind", "PRESETS", "ProbeClassifier", "TimeSformer", "attention_kinds", "build_attention",
    "register_attention", "timesformer", "vision_transformer",
]
