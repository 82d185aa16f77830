"""Initialising DnA's negative branch (Q-, V-) of an attention module from its positive one
(when a checkpoint has none, softmax weights; or a cross-attention set from a self-attention).

Policies (alpha, ``neg_scalers``, keeps the model's ``alpha_init`` under all of them):

* ``random``: Q-, V- trunc-normal(std 0.02), zero bias: the reference's choice (its
  TimeSformer keeps its fresh initialisation for weights the checkpoint lacks). Default.
* ``scaled_copy``: Q- = eps * Q+, V- = eps * V+ (weights and biases), eps = 1e-4 by
  default: the VisCoP choice, the model starts as the softmax model up to O(eps).
* ``orthogonal``: Q- as ``random``; per head, V- drawn in the orthogonal complement of the
  column space of that head's V+ (principal angles all 90 degrees), rescaled to V+'s
  Frobenius norm, zero bias: our option to test the paper's quasi-orthogonality argument.
"""

from __future__ import annotations

import torch
from einops import rearrange
from timm.layers import trunc_normal_
from torch import Tensor, nn

from dna_video.models.init import init_module

__all__ = ["DNA_INIT_POLICIES", "init_negative_branch", "orthogonal_complement_like"]

DNA_INIT_POLICIES = ("random", "scaled_copy", "orthogonal")


def orthogonal_complement_like(w_pos: Tensor, num_heads: int) -> Tensor:
    """A random (D, D) weight whose head-h row block (d rows) spans a subspace of R^D
    orthogonal to the row span of ``w_pos``'s head-h block, with the same Frobenius norm.

    In the math convention V = X W (W: D x d per head) the row span of our (d, D) block is
    W's column space, the subspace the paper's principal angles compare.
    """
    dim = w_pos.shape[1]
    heads = rearrange(w_pos.detach().double(), "(h d) c -> h d c", h=num_heads)
    if 2 * heads.shape[1] > dim:
        raise ValueError(
            f"orthogonal DnA init needs head_dim <= dim / 2 (head_dim={heads.shape[1]}, dim={dim}): "
            "a head's V+ leaves no room for an orthogonal V-"
        )
    out = []
    for w in heads:
        # Orthonormal basis of the row span of this head's V+ (rank-aware).
        u, s, _ = torch.linalg.svd(w.T, full_matrices=False)
        basis = u[:, s > s.max() * 1e-10] if s.max() > 0 else u[:, :0]
        g = torch.empty_like(w)
        trunc_normal_(g, std=0.02)
        g = g - (g @ basis) @ basis.T
        norm = torch.linalg.matrix_norm(w)
        out.append(g * (norm / torch.linalg.matrix_norm(g)) if norm > 0 else g)
    return rearrange(torch.stack(out), "h d c -> (h d) c").to(w_pos.dtype)


@torch.no_grad()
def init_negative_branch(attn: nn.Module, policy: str = "random", eps: float = 1e-4) -> None:
    """Set ``attn.q_neg`` and ``attn.v_neg`` by ``policy`` (see the module docstring), from
    the positive projections currently in ``attn.qkv``. A module without ``v_neg`` (the
    shared-value ablation, ``dna_shared_v``) gets its Q- only, one without ``q_neg`` (Q- tied
    to Q+, ``dna_tied_q``) its V- only."""
    if policy not in DNA_INIT_POLICIES:
        raise ValueError(f"unknown DnA init policy {policy!r}; choose one of {list(DNA_INIT_POLICIES)}")
    d = attn.dim
    w_q, _, w_v = attn.qkv.weight.split(d)
    b_q, _, b_v = attn.qkv.bias.split(d) if attn.qkv.bias is not None else (None, None, None)
    q_neg, v_neg = getattr(attn, "q_neg", None), getattr(attn, "v_neg", None)
    if policy == "scaled_copy":
        if q_neg is not None:
            q_neg.weight.copy_(eps * w_q)
            if q_neg.bias is not None:
                q_neg.bias.copy_(eps * b_q if b_q is not None else 0.0)
        if v_neg is not None:
            v_neg.weight.copy_(eps * w_v)
            if v_neg.bias is not None:
                v_neg.bias.copy_(eps * b_v if b_v is not None else 0.0)
        return
    if q_neg is not None:
        init_module(q_neg)
    if v_neg is None:
        return
    init_module(v_neg)
    if policy == "orthogonal":
        attn.v_neg.weight.copy_(orthogonal_complement_like(w_v, attn.num_heads))
