"""dna-video: Denoising Attention (DnA) video transformers with PyTorch Lightning."""

import os

# OpenMP threads that sleep when idle, unless the user chose (see cli.py: 3.5 instead of 13
# clips/s on 2 shared cores with spinning threads). Read once, when torch loads: set here,
# before the imports below, because `python -m dna_video` and the `dna-video` command import
# this package first.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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
