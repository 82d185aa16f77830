"""Cross-attention for probes; now in :mod:`dna_video.models.attention.cross` (re-exported here)."""

from .models.attention import (  # noqa: F401
    NEG_INIT_POLICIES,
    CrossAttention,
    DenoisingCrossAttention,
    SoftmaxCrossAttention,
    build_cross_attention,
    init_from_self_attention,
)

__all__ = [
    "CrossAttention", "SoftmaxCrossAttention", "DenoisingCrossAttention", "NEG_INIT_POLICIES",
    "build_cross_attention", "init_from_self_attention",
]
