"""Attention: one interface (:mod:`.base`), the one DnA core (:mod:`.core`), the kinds
(:mod:`.kinds`), cross-attention for probes (:mod:`.cross`) and the registry that names them
and says what each offers (:mod:`.registry`). Add a kind with :func:`register_attention`."""

from dna_video.models.attention.base import Attention, merge_heads, split_heads
from dna_video.models.attention.core import TERMS, dna_attention, dna_attention_maps, dna_terms
from dna_video.models.attention.cross import NEG_INIT_POLICIES, CrossAttention, DenoisingCrossAttention, SoftmaxCrossAttention, init_from_self_attention
from dna_video.models.attention.kinds import (
    CogAttention,
    DenoisingAttention,
    DifferentialAttention,
    SharedValueDnA,
    SoftmaxAttention,
    TiedQueryDnA,
    diff_lambda_init,
)
from dna_video.models.attention.negative_init import DNA_INIT_POLICIES, init_negative_branch, orthogonal_complement_like
from dna_video.models.attention.registry import (
    ATTENTIONS,
    DEFAULT_ATTENTION,
    DNA_EXTRAS,
    AttentionKind,
    CheckpointExtra,
    NegativeBranch,
    attention_kind,
    attention_kinds,
    build_attention,
    build_cross_attention,
    cross_attention_kind,
    cross_attention_kinds,
    kind_of,
    kwargs_by_kind,
    negative_branch_weights,
    on_register,
    register_attention,
)

__all__ = [
    "Attention", "split_heads", "merge_heads", "dna_attention", "dna_attention_maps", "dna_terms", "TERMS",
    "CrossAttention", "SoftmaxCrossAttention", "DenoisingCrossAttention", "NEG_INIT_POLICIES",
    "init_from_self_attention", "SoftmaxAttention", "DenoisingAttention", "SharedValueDnA",
    "TiedQueryDnA", "DifferentialAttention", "CogAttention", "diff_lambda_init", "DNA_INIT_POLICIES",
    "init_negative_branch", "orthogonal_complement_like", "ATTENTIONS", "DEFAULT_ATTENTION", "DNA_EXTRAS", "AttentionKind",
    "CheckpointExtra", "NegativeBranch", "attention_kind", "attention_kinds", "build_attention",
    "build_cross_attention", "cross_attention_kind", "cross_attention_kinds", "kind_of", "kwargs_by_kind", "negative_branch_weights", "on_register", "register_attention",
]
