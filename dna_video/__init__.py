"""dna-video: Denoising Attention (DnA) video transformers with PyTorch Lightning."""

from .attention import ATTENTIONS, Attention, DenoisingAttention, SoftmaxAttention, build_attention
from .timesformer import PRESETS, TimeSformer, timesformer

__version__ = "0.1.0"

__all__ = [
    "ATTENTIONS",
    "Attention",
    "DenoisingAttention",
    "PRESETS",
    "SoftmaxAttention",
    "TimeSformer",
    "build_attention",
    "timesformer",
]
