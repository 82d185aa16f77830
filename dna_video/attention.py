"""Self-attention modules behind one interface: (B, L, D) -> (B, L, D).

Every module here keeps the official ViT/TimeSformer parameter names (`qkv` with rows
[Q; K; V], `proj`) so checkpoints map by name, and offers two paths:

* ``forward(x)``: the training path. It goes through
  ``torch.nn.functional.scaled_dot_product_attention`` so that no L x L matrix is kept for
  backward (the fused CPU/GPU kernels recompute it). Exception: when gradients are needed
  and the sequence is very short (at most :attr:`Attention.explicit_max_len` tokens, e.g.
  the temporal attention over 8 frames), explicit batched matmuls are used instead: there
  the fused kernel's per-(sequence, head) overhead dominates, forward+backward measured
  10-25% faster explicitly, and an L x L map is smaller than the queries themselves.
* ``forward_with_maps(x)``: an explicit, written-out path that also returns the attention
  maps (for visualisation and analysis). Slow and memory hungry by design.

Select an implementation with :func:`build_attention` and a config string (``"softmax"``,
``"dna"``, or a variant of :mod:`dna_video.attention_variants`: ``"dna_shared_v"``, ``"diff"``,
``"cog"``); both the temporal and the spatial path of the TimeSformer use it.
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


def split_heads(x: Tensor, heads: list[int], head_dim: int) -> list[Tensor]:
    """(B, L, sum(heads) * d) -> one (B, n, L, d) view per entry n of ``heads``.

    The split happens on the (B, L, N, d) view and each piece is transposed afterwards, so
    that backward concatenates the gradients (which the SDPA kernels return in (B, L, n, d)
    memory order) directly in the (B, L, N * d) layout of the projection's output: no
    permuting copy of the whole gradient. ``split`` rather than slicing: the backward of a
    slice zero-fills a full-size buffer per slice.
    """
    pieces = x.unflatten(-1, (sum(heads), head_dim)).split(heads, dim=2)
    return [rearrange(t, "b l n d -> b n l d") for t in pieces]


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

    #: Longest sequence that takes the explicit path when gradients are needed. Measured on
    #: CPU (fwd+bwd): explicit wins up to 16 tokens, the fused kernel from 32 on.
    explicit_max_len: int = 16

    def _dropout_p(self) -> float:
        return self.attn_drop if self.training else 0.0

    def _explicit(self, x: Tensor) -> bool:
        return x.shape[1] <= self.explicit_max_len and torch.is_grad_enabled() and x.requires_grad

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
        return split_heads(self.qkv(x), [self.num_heads] * 3, self.head_dim)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self._qkv(x)
        if self._explicit(x):
            attn = torch.softmax(q @ (k.transpose(-2, -1) * self.scale), dim=-1)
            out = F.dropout(attn, self._dropout_p()) @ v
        else:
            # The kernel's output follows the query's (B, L, H, d) memory order: the
            # rearrange below is a view.
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=self._dropout_p())
        return self.proj_drop(self.proj(rearrange(out, "b h l d -> b l (h d)")))

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v = self._qkv(x)
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        out = F.dropout(attn, self._dropout_p()) @ v
        out = self.proj_drop(self.proj(rearrange(out, "b h l d -> b l (h d)")))
        return out, {"attn": attn}


def _fuse_dna_weights(
    w_qkv: Tensor, b_qkv: Tensor | None, w_qneg: Tensor, b_qneg: Tensor | None,
    w_vneg: Tensor, b_vneg: Tensor | None, alpha: Tensor,
) -> tuple[Tensor, Tensor | None]:
    """Weight and bias of one Linear(D, 5D) with output rows [Q+; K; V+; -Q-; alpha*V-]."""
    # alpha_h scales the rows of V- that belong to head h.
    alpha_rows = alpha.repeat_interleave(w_vneg.shape[0] // alpha.shape[0])
    weight = torch.cat([w_qkv, -w_qneg, alpha_rows[:, None] * w_vneg])
    bias = None if b_qkv is None else torch.cat([b_qkv, -b_qneg, alpha_rows * b_vneg])
    return weight, bias


class _DnAProjection(torch.autograd.Function):
    """x -> x W^T + b with W, b from :func:`_fuse_dna_weights`: Q+, K, V+, -Q- and alpha V-
    in one GEMM, differentiable in x, every parameter and alpha.

    Plain autograd would keep the fused (5D x D) weight alive from forward to backward (at
    batch 1 and D = 768 as much memory as ~2.5 activations of the whole clip, per attention)
    and differentiate the concatenation, negation and scaling op by op. Here the weight is
    rebuilt in backward, and the parameters' gradients are read off the one (5D x D) weight
    gradient in place: the Q+/K/V+ rows come first, so ``qkv``'s gradient is a view of it.
    Under autocast both GEMMs of backward run in the forward's compute dtype.
    """

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


class DenoisingAttention(Attention):
    """Denoising Attention (DnA, Campos et al., ECCV 2026), per head h:

        softmax(Q+_h K_h^T / sqrt d) V+_h + alpha_h * softmin(Q-_h K_h^T / sqrt d) V-_h

    with softmin(z) = softmax(-z), the key K shared by both branches and one output
    projection after the sum. Parameters use the reference layout: ``qkv`` (rows
    [Q+; K; V+], identical to ViT's ``qkv``), ``q_neg`` (Q-), ``v_neg`` (V-), ``proj``, and
    ``neg_scalers`` (alpha, one unconstrained scalar per head).

    Training path: one GEMM computes Q+, K, V+, -Q- and alpha*V- from the concatenated
    weights (:class:`_DnAProjection`); each branch is one fused
    ``scaled_dot_product_attention`` call over the shared K (the negated query turns softmin
    into softmax; alpha is folded into V-), and their outputs are summed. Numerically this is
    the formula above; the explicit path :meth:`forward_with_maps` writes it out term by term.

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

    def forward(self, x: Tensor) -> Tensor:
        h = self.num_heads
        heads = _DnAProjection.apply(
            x, self.qkv.weight, self.qkv.bias, self.q_neg.weight, self.q_neg.bias,
            self.v_neg.weight, self.v_neg.bias, self.neg_scalers,
        )
        # (B, L, 5D) -> five (B, H, L, d) views, no copies.
        q_pos, k, v_pos, q_neg, v_neg = split_heads(heads, [h] * 5, self.head_dim)
        p = self._dropout_p()
        if self._explicit(x):
            # Both queries against the shared K in one batched matmul: (B, H, 2L, L) maps.
            queries = torch.cat([q_pos, q_neg], dim=2)
            attn = torch.softmax(queries @ (k.transpose(-2, -1) * self.scale), dim=-1)
            a_pos, a_neg = F.dropout(attn, p).split(x.shape[1], dim=2)
            out = a_pos @ v_pos + a_neg @ v_neg
        else:
            # Two calls to the fused kernel sharing K rather than one call over 2H heads: one
            # call needs K repeated (a copy, and a reduction in backward) and a strided sum of
            # the branch outputs, and measured slower on CPU at every TimeSformer shape, by
            # up to 7% (see README, Performance). Both outputs come in the query's
            # (B, L, H, d) memory order: the sum is plain elementwise work and the rearrange
            # below a view.
            out = F.scaled_dot_product_attention(q_pos, k, v_pos, dropout_p=p)
            out = out + F.scaled_dot_product_attention(q_neg, k, v_neg, dropout_p=p)
        return self.proj_drop(self.proj(rearrange(out, "b h l d -> b l (h d)")))

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
    layer_index: int = 1,
    num_layers: int = 0,
    **kwargs,
) -> Attention:
    """Build the attention module named ``kind`` (a key of :data:`ATTENTIONS`, the variants of
    :mod:`dna_video.attention_variants` included).

    Extra keyword arguments go to that implementation only (e.g. ``alpha_init`` for
    ``"dna"``); passing one that it does not take is an error. ``layer_index`` (the block's
    1-based index) and ``num_layers`` reach the kinds that depend on depth (``takes_depth``).
    """
    from . import attention_variants  # noqa: F401  (registers the variants; imports this module)

    try:
        cls = ATTENTIONS[kind]
    except KeyError:
        raise ValueError(
            f"unknown attention {kind!r}; choose one of {sorted(ATTENTIONS)}"
        ) from None
    if getattr(cls, "takes_depth", False):
        kwargs.update(layer_index=layer_index, num_layers=num_layers)
    return cls(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop, **kwargs)
