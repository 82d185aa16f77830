"""The DnA training path with a hand-written backward, kept here as the alternative that
:func:`benchmarks.attention.projection_rows` measures the library's plain-autograd path against.

It computes Q+, K, V+, -Q- and alpha*V- with ONE GEMM from the concatenated weights
[Q+; K; V+; -Q-; alpha V-] inside an autograd Function that rebuilds that (5D x D) weight in
backward instead of keeping it, and reads every parameter's gradient (alpha's included) off
the one (5D x D) weight gradient. The library used it until the side-by-side comparison
(benchmarks/README.md) showed no gain beyond the run-to-run spread; the plain form is shorter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from dna_video.models.attention import DenoisingAttention, split_heads

__all__ = ["HandWrittenDnA"]


def _fuse_dna_weights(
    w_qkv: Tensor, b_qkv: Tensor | None, w_qneg: Tensor, b_qneg: Tensor | None,
    w_vneg: Tensor, b_vneg: Tensor | None, alpha: Tensor,
) -> tuple[Tensor, Tensor | None]:
    """Weight and bias of one Linear(D, 5D) with output rows [Q+; K; V+; -Q-; alpha*V-]."""
    alpha_rows = alpha.repeat_interleave(w_vneg.shape[0] // alpha.shape[0])  # alpha_h per row of head h
    weight = torch.cat([w_qkv, -w_qneg, alpha_rows[:, None] * w_vneg])
    bias = None if b_qkv is None else torch.cat([b_qkv, -b_qneg, alpha_rows * b_vneg])
    return weight, bias


class _DnAProjection(torch.autograd.Function):
    """x -> x W^T + b with W, b from :func:`_fuse_dna_weights`, differentiable in x, every
    weight and alpha; under autocast both GEMMs of backward run in the forward's dtype."""

    @staticmethod
    def forward(ctx, x, w_qkv, b_qkv, w_qneg, b_qneg, w_vneg, b_vneg, alpha):  # type: ignore[override]
        weight, bias = _fuse_dna_weights(w_qkv, b_qkv, w_qneg, b_qneg, w_vneg, b_vneg, alpha)
        out = F.linear(x, weight, bias)
        # Under autocast F.linear computed in out.dtype from a cast copy of x: keep that copy.
        ctx.save_for_backward(x.to(out.dtype), w_qkv, b_qkv, w_qneg, b_qneg, w_vneg, b_vneg, alpha)
        ctx.x_dtype = x.dtype
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        x, w_qkv, b_qkv, w_qneg, b_qneg, w_vneg, b_vneg, alpha = ctx.saved_tensors
        d = w_qneg.shape[0]
        grad_x = None
        if ctx.needs_input_grad[0]:
            weight, _ = _fuse_dna_weights(w_qkv, b_qkv, w_qneg, b_qneg, w_vneg, b_vneg, alpha)
            grad_x = (grad @ weight.to(grad.dtype)).to(ctx.x_dtype)
            del weight
        if not any(ctx.needs_input_grad[1:]):  # frozen projections
            return (grad_x,) + (None,) * 7
        flat = grad.reshape(-1, grad.shape[-1])
        g_w = (flat.t() @ x.reshape(-1, x.shape[-1])).to(w_qkv.dtype)  # (5D, D)
        g_b = flat.sum(0).to(w_qkv.dtype) if b_qkv is not None else None
        alpha_rows = alpha.repeat_interleave(d // alpha.shape[0])
        # d out / d alpha_h: the alpha*V- rows of head h against V-'s weights and bias.
        g_alpha = (g_w[4 * d:] * w_vneg).sum(1)
        if g_b is not None:
            g_alpha = g_alpha + g_b[4 * d:] * b_vneg
        g_alpha = g_alpha.view(alpha.shape[0], -1).sum(1)
        g_w[3 * d: 4 * d].neg_()
        g_w[4 * d:].mul_(alpha_rows[:, None])
        grads_b = (None, None, None)
        if g_b is not None:
            g_b[3 * d: 4 * d].neg_()
            g_b[4 * d:].mul_(alpha_rows)
            grads_b = (g_b[: 3 * d], g_b[3 * d: 4 * d], g_b[4 * d:])
        return (
            grad_x, g_w[: 3 * d], grads_b[0], g_w[3 * d: 4 * d], grads_b[1], g_w[4 * d:], grads_b[2], g_alpha,
        )


class HandWrittenDnA(DenoisingAttention):
    """:class:`~dna_video.models.attention.DenoisingAttention` (same parameters, same outputs) whose
    training path projects through :class:`_DnAProjection` and folds alpha into V-."""

    def forward(self, x: Tensor) -> Tensor:
        h = self.num_heads
        projected = _DnAProjection.apply(
            x, self.qkv.weight, self.qkv.bias, self.q_neg.weight, self.q_neg.bias,
            self.v_neg.weight, self.v_neg.bias, self.neg_scalers,
        )
        # (B, L, 5D) -> five (B, H, L, d) views, no copies.
        q_pos, k, v_pos, neg_query, v_neg_scaled = split_heads(projected, [h] * 5, self.head_dim)
        p = self._dropout_p()
        if self._explicit(x):
            queries = torch.cat([q_pos, neg_query], dim=2)
            attn = torch.softmax(queries @ (k.transpose(-2, -1) * self.scale), dim=-1)
            a_pos, a_neg = F.dropout(attn, p).split(x.shape[1], dim=2)
            out = a_pos @ v_pos + a_neg @ v_neg_scaled
        else:
            out = F.scaled_dot_product_attention(q_pos, k, v_pos, dropout_p=p)
            out = out + F.scaled_dot_product_attention(neg_query, k, v_neg_scaled, dropout_p=p)
        return self.proj_drop(self.proj(rearrange(out, "b h l d -> b l (h d)")))
