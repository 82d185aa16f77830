"""The DnA computation, once, for every module that uses it (self-attention, the shared-value
ablation, cross-attention). Per head h, on (B, H, L, d) queries and (B, H, S, d) keys/values:

    softmax(Q+_h K_h^T / sqrt d) V+_h  +  alpha_h * softmin(Q-_h K_h^T / sqrt d) V-_h

with softmin(z) = softmax(-z) and K shared by both branches. The shared-value ablation is the
same with V- = V+ and the branch subtracted (pass ``v_neg=v_pos`` and ``-alpha``).

* :func:`dna_attention`: the training path. Fused ``scaled_dot_product_attention`` per branch
  over the shared K (softmin as softmax of the NEGATED QUERY: a fused kernel may take the row
  maximum before it applies the scale, so a negative scale would break it), or with
  ``explicit`` both queries against K in one batched matmul.
* :func:`dna_attention_maps`: the formula written out term by term, returning both maps: the
  reference the fused path is tested against, and the maps the analysis reads.
* :func:`dna_terms`: the same, every term kept per head (maps, queries, each branch's output):
  what the mechanism measures read (:data:`TERMS`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["dna_attention", "dna_attention_maps", "dna_terms", "TERMS"]

#: What a kind's ``forward_with_terms`` returns per head, besides its output (the mechanism
#: measures of :mod:`dna_video.analysis.denoising`):
#:
#: * ``positive``, ``negative``: the two maps (B, H, L, S), as ``forward_with_maps`` names them;
#: * ``query_positive``: the query of the positive map (B, H, L, d);
#: * ``query_negative``: the query whose SOFTMAX over the keys is the negative map (DnA:
#:   -Q-, since softmin(Q- K^T) = softmax(-Q- K^T)); cos(query_positive, query_negative) is
#:   cos(q+, -q-): 1 when the negative map repeats the positive one;
#: * ``out_positive``, ``out_negative``: each branch's signed contribution to the head's output
#:   before ``proj`` (B, H, L, dv), summing to it (DnA: alpha_h softmin(.) V-).
TERMS = ("positive", "negative", "query_positive", "query_negative", "out_positive", "out_negative")


def dna_attention(
    q_pos: Tensor,
    q_neg: Tensor,
    k: Tensor,
    v_pos: Tensor,
    v_neg: Tensor,
    alpha: Tensor,
    *,
    scale: float,
    dropout_p: float = 0.0,
    explicit: bool = False,
) -> Tensor:
    """The DnA output per head, (B, H, L, d). ``alpha``: (H,) per-head weights of the negative
    branch; ``v_neg is v_pos`` (the shared-value ablation) multiplies V once."""
    # In the compute dtype: under autocast a float32 alpha would promote the negative branch,
    # and everything after it, to float32. Indexing, not einops: alpha is often a Parameter,
    # and einops' first call on a new tensor type makes torch.compile compile again.
    alpha = alpha[:, None, None].to(q_pos.dtype)  # h -> h 1 1
    if explicit:
        # (B, H, 2L, S) maps in one matmul; alpha on the map rather than the output: the
        # product kept for backward is then map-sized, smaller than the queries at these lengths.
        queries = torch.cat([q_pos, -q_neg], dim=2)
        maps = torch.softmax(queries @ (k.transpose(-2, -1) * scale), dim=-1)
        a_pos, a_neg = F.dropout(maps, dropout_p).split(q_pos.shape[2], dim=2)
        if v_neg is v_pos:
            return (a_pos + alpha * a_neg) @ v_pos
        return a_pos @ v_pos + (alpha * a_neg) @ v_neg
    # Two calls sharing K rather than one over 2H heads, which needs K repeated (a copy, and
    # a reduction in backward); why: benchmarks/README.md, "Why the code is the way it is".
    # Both outputs come in the query's memory order, which the scale and sum keep.
    out = F.scaled_dot_product_attention(q_pos, k, v_pos, dropout_p=dropout_p)
    # Q- is negated, not the kernel's scale: a negative scale is right on the CPU kernels and no
    # faster (benchmarks.profile_attention --negative-scale), and the ONNX export's SDPA
    # (onnxscript) multiplies Q and K by sqrt(scale): NaN.
    return out + alpha * F.scaled_dot_product_attention(-q_neg, k, v_neg, dropout_p=dropout_p)


def dna_attention_maps(
    q_pos: Tensor,
    q_neg: Tensor,
    k: Tensor,
    v_pos: Tensor,
    v_neg: Tensor,
    alpha: Tensor,
    *,
    scale: float,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """The formula written out: (output (B, H, L, d), positive map, negative map), each map
    (B, H, L, S) with rows summing to 1."""
    terms = dna_terms(q_pos, q_neg, k, v_pos, v_neg, alpha, scale=scale, dropout_p=dropout_p)
    return terms["out_positive"] + terms["out_negative"], terms["positive"], terms["negative"]


def dna_terms(
    q_pos: Tensor,
    q_neg: Tensor,
    k: Tensor,
    v_pos: Tensor,
    v_neg: Tensor,
    alpha: Tensor,
    *,
    scale: float,
    dropout_p: float = 0.0,
) -> dict[str, Tensor]:
    """The formula written out, every term per head (:data:`TERMS`); the head's output is
    ``out_positive + out_negative``."""
    positive = torch.softmax((q_pos @ k.transpose(-2, -1)) * scale, dim=-1)
    negative = F.softmin((q_neg @ k.transpose(-2, -1)) * scale, dim=-1)
    alpha = alpha[None, :, None, None]  # h -> 1 h 1 1
    return {
        "positive": positive,
        "negative": negative,
        "query_positive": q_pos,
        "query_negative": -q_neg,  # softmin(Q- K^T) = softmax(-Q- K^T)
        "out_positive": F.dropout(positive, dropout_p) @ v_pos,
        "out_negative": alpha * (F.dropout(negative, dropout_p) @ v_neg),
    }
