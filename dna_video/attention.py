"""Self-attention behind one interface; the kinds and their registry now live in
:mod:`dna_video.models.attention` (re-exported here)."""

from .models.attention import (  # noqa: F401
    ATTENTIONS,
    Attention,
    DenoisingAttention,
    SoftmaxAttention,
    build_attention,
    split_heads,
)

__all__ = ["Attention", "SoftmaxAttention", "DenoisingAttention", "ATTENTIONS", "build_attention"]
