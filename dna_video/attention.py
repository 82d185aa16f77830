"""Self-attention modules behind one interface: (B, L, D) -> (B, L, D).

Every module here keeps the official ViT/TimeSformer parameter names (`qkv` with rows
[Q; K; V], `proj`) so checkpoints map by name, and offers two paths:

* ``forward(x)``: the training path. It goes through
  ``torch.nn.functional.scaled_dot_product_attention`` so that no L x L matrix is kept for
  backward (the fused CPU/GPU kernels recompute it).
* ``forward_with_maps(x)``: an explicit, written-out path that also returns the attention
  maps (for visualisation and analysis). Slow and memory hungry by design.

Select an implementation with :func:`build_attention` and a config string (``"softmax"``,
``"dna"``); both the temporal and the spatial path of the TimeSformer use it.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

__all__ = [
    "Attention",
    "SoftmaxAttention",
    "DenoisingAttention",
    "ATTENTIONS",
    "build_attention",
]


class Attention(nn.Module):
    """Interface of a multi-head self-attention module.

    Args:
        dim: token width D.
        num_heads: number of heads H; ``dim`` must be divisible by it.
        qkv_bias: bias on the query/key/value projections.
        attn_drop: dropout on the attention weights. Keep 0 for training speed: the fused
            CPU kernel only runs without dropout, otherwise PyTorch falls back to a path that
            materialises the L x L matrix.
        proj_drop: dropout after the output projection.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def _dropout_p(self) -> float:
        return self.attn_drop if self.training else 0.0

    def forward(self, x: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:  # pragma: no cover
        """Output and attention maps, each map (B, H, L, L), rows summing to 1."""
        raise NotImplementedError


class SoftmaxAttention(Attention):
    """Standard multi-head self-attention (ViT's ``Attention``): softmax(Q K^T / sqrt(d)) V."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # (B, L, 3D) -> three (B, H, L, d) views, no copy.
        q, k, v = rearrange(
            self.qkv(x), "b l (s h d) -> s b h l d", s=3, h=self.num_heads
        ).unbind(0)
        return q, k, v

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self._qkv(x)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self._dropout_p())
        return self.proj_drop(self.proj(rearrange(out, "b h l d -> b l (h d)")))

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v = self._qkv(x)
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        out = F.dropout(attn, self._dropout_p()) @ v
        out = self.proj_drop(self.proj(rearrange(out, "b h l d -> b l (h d)")))
        return out, {"attn": attn}


class DenoisingAttention(Attention):
    """Denoising Attention (DnA, Campos et al., ECCV 2026), per head h:

        softmax(Q+_h K_h^T / sqrt d) V+_h + alpha_h * softmin(Q-_h K_h^T / sqrt d) V-_h

    with softmin(z) = softmax(-z), the key K shared by both branches and one output
    projection after the sum. Parameters use the reference layout: ``qkv`` (rows
    [Q+; K; V+], identical to ViT's ``qkv``), ``q_neg`` (Q-), ``v_neg`` (V-), ``proj``, and
    ``neg_scalers`` (alpha, one unconstrained scalar per head).

    Training path: one GEMM computes Q+, -Q-, K, V+ and alpha*V- from the concatenated
    weights; the two branches then run as ONE ``scaled_dot_product_attention`` call over
    2H heads (the negated query turns softmin into softmax; alpha is folded into V-), and
    their outputs are summed. Numerically this is the formula above; the explicit path
    :meth:`forward_with_maps` writes it out term by term.

    Args:
        dim: token width D.
        num_heads: number of heads H.
        qkv_bias: bias on the Q+/K/V+ and Q-/V- projections.
        attn_drop: dropout on both attention maps (as in the reference); keep 0 for speed.
        proj_drop: dropout after the output projection.
        alpha_init: initial value of every alpha_h (0.5 in the reference).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        alpha_init: float = 0.5,
    ) -> None:
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.q_neg = nn.Linear(dim, dim, bias=qkv_bias)
        self.v_neg = nn.Linear(dim, dim, bias=qkv_bias)
        self.neg_scalers = nn.Parameter(torch.full((num_heads,), float(alpha_init)))

    def _fused_weight_bias(self) -> tuple[Tensor, Tensor | None]:
        """Weights of one Linear(D, 5D) whose output rows are [Q+; -Q-; K; V+; alpha*V-]."""
        d = self.dim
        w_q, w_k, w_v = self.qkv.weight.split(d)
        # alpha_h scales the rows of V- that belong to head h.
        alpha_rows = self.neg_scalers.repeat_interleave(self.head_dim).unsqueeze(1)
        weight = torch.cat([w_q, -self.q_neg.weight, w_k, w_v, alpha_rows * self.v_neg.weight])
        if self.qkv.bias is None:
            return weight, None
        b_q, b_k, b_v = self.qkv.bias.split(d)
        bias = torch.cat([b_q, -self.q_neg.bias, b_k, b_v, alpha_rows[:, 0] * self.v_neg.bias])
        return weight, bias

    def forward(self, x: Tensor) -> Tensor:
        h = self.num_heads
        weight, bias = self._fused_weight_bias()
        # (B, L, 5D) viewed as 5H heads: [Q+ | -Q-] are the 2H queries, K the H keys,
        # [V+ | alpha V-] the 2H values. Views, no copies; `split` (not slicing) so that
        # backward concatenates once instead of zero-filling a full-size buffer per slice.
        heads = rearrange(F.linear(x, weight, bias), "b l (n d) -> b n l d", n=5 * h)
        q, k, v = heads.split([2 * h, h, 2 * h], dim=1)
        # The shared key is repeated for the negative branch (one copy of B*L*D, cheap
        # next to the GEMMs) so that both branches are one dense 4-D call to the fused kernel.
        out = F.scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), v, dropout_p=self._dropout_p())
        # Sum the branches in (B, L, 2H, d) order: the kernel's output follows the query's
        # (B, L, heads, d) memory layout, so this sum yields (B, L, D) without a transpose copy.
        out = rearrange(out, "b (s h) l d -> b l s (h d)", s=2).sum(dim=2)
        return self.proj_drop(self.proj(out))

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        split = "b l (h d) -> b h l d"
        q_pos, k, v_pos = (
            rearrange(t, split, h=self.num_heads) for t in self.qkv(x).split(self.dim, dim=-1)
        )
        q_neg = rearrange(self.q_neg(x), split, h=self.num_heads)
        v_neg = rearrange(self.v_neg(x), split, h=self.num_heads)
        positive = torch.softmax((q_pos @ k.transpose(-2, -1)) * self.scale, dim=-1)
        negative = F.softmin((q_neg @ k.transpose(-2, -1)) * self.scale, dim=-1)
        p = self._dropout_p()
        alpha = self.neg_scalers.view(1, -1, 1, 1)
        out = F.dropout(positive, p) @ v_pos + alpha * (F.dropout(negative, p) @ v_neg)
        out = self.proj_drop(self.proj(rearrange(out, "b h l d -> b l (h d)")))
        return out, {"positive": positive, "negative": negative}


ATTENTIONS: dict[str, Callable[..., Attention]] = {
    "softmax": SoftmaxAttention,
    "dna": DenoisingAttention,
}


def build_attention(
    kind: str,
    dim: int,
    num_heads: int,
    qkv_bias: bool = True,
    attn_drop: float = 0.0,
    proj_drop: float = 0.0,
    **kwargs,
) -> Attention:
    """Build the attention module named ``kind`` (a key of :data:`ATTENTIONS`).

    Extra keyword arguments go to that implementation only (e.g. ``alpha_init`` for
    ``"dna"``); passing one that it does not take is an error.
    """
    try:
        cls = ATTENTIONS[kind]
    except KeyError:
        raise ValueError(
            f"unknown attention {kind!r}; choose one of {sorted(ATTENTIONS)}"
        ) from None
    return cls(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop, **kwargs)
