"""Cross-attention modules behind one interface: queries (B, Lq, D) attend a context (B, Lk, D).

The probes of :mod:`dna_video.models.probe` use them: a few learned query tokens read the tokens of a
frozen encoder (the VisCoP integration of DnA). Queries come from the query tokens, keys and
values from the context tokens:

* :class:`SoftmaxCrossAttention`: softmax(Q K^T / sqrt d) V, per head;
* :class:`DenoisingCrossAttention`: the DnA of :mod:`.core`, Q+, Q- from the queries, K, V+, V-
  from the context, K shared, one output projection.

Parameters: ``q`` (Q, or Q+), ``kv`` (rows [K; V], or [K; V+]), ``proj``; DnA adds ``q_neg``
(Q-), ``v_neg`` (V-) and ``neg_scalers`` (alpha), as the self-attention.
:func:`init_from_self_attention` fills them from a self-attention module (``qkv`` rows
[Q; K; V]), Q-, V- by a policy (:data:`NEG_INIT_POLICIES`): each class sets its own parameters
(:meth:`CrossAttention.start_from`), so a new kind's cross-attention brings its own. Which
cross-attention an attention kind uses is stated in :mod:`.registry`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dna_video.models.init import init_module
from dna_video.models.attention.base import MultiHead, split_heads
from dna_video.models.attention.core import dna_attention, dna_attention_maps
from dna_video.models.attention.negative_init import orthogonal_complement_like

__all__ = [
    "CrossAttention",
    "SoftmaxCrossAttention",
    "DenoisingCrossAttention",
    "NEG_INIT_POLICIES",
    "init_from_self_attention",
]


class CrossAttention(MultiHead):
    """Interface of a multi-head cross-attention module.

    Args:
        dim: token width D of both the queries and the context.
        num_heads: number of heads H; ``dim`` must be divisible by it.
        qkv_bias: bias on the query, key and value projections.
        attn_drop: dropout on the attention weights (keep 0: the fused kernel needs it).
        proj_drop: dropout after the output projection.
    """

    def __init__(
        self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0
    ) -> None:
        super().__init__(dim, num_heads, attn_drop, proj_drop)
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, 2 * dim, bias=qkv_bias)

    def forward(self, queries: Tensor, context: Tensor) -> Tensor:  # pragma: no cover - interface
        """(B, Lq, D) queries, (B, Lk, D) context -> (B, Lq, D)."""
        raise NotImplementedError

    def forward_with_maps(self, queries: Tensor, context: Tensor) -> tuple[Tensor, dict[str, Tensor]]:  # pragma: no cover
        """Output and attention maps, each (B, H, Lq, Lk), rows summing to 1."""
        raise NotImplementedError

    @torch.no_grad()
    def start_from(self, source: nn.Module, neg_init: str, eps: float) -> None:
        """Set this module's parameters from the self-attention ``source`` (same width and
        heads, ``qkv`` rows [Q; K; V]): Q from the query rows, K and V from the key and value
        rows, the output projection from ``source.proj``. A kind with parameters of its own
        (DnA's Q-, V-) overrides this, calls it, then sets them by ``neg_init`` / ``eps``
        (see :data:`NEG_INIT_POLICIES`); the others ignore both."""
        d = self.dim
        self.q.weight.copy_(source.qkv.weight[:d])
        self.kv.weight.copy_(source.qkv.weight[d:])
        for mine, theirs in [(self.q.bias, lambda b: b[:d]), (self.kv.bias, lambda b: b[d:])]:
            if mine is not None:
                mine.copy_(theirs(source.qkv.bias) if source.qkv.bias is not None else torch.zeros_like(mine))
        self.proj.load_state_dict(source.proj.state_dict())


class SoftmaxCrossAttention(CrossAttention):
    """Multi-head cross-attention: softmax(Q K^T / sqrt(d)) V, Q from the queries, K and V from
    the context."""

    def _heads(self, queries: Tensor, context: Tensor) -> list[Tensor]:
        h = self.num_heads
        return split_heads(self.q(queries), [h], self.head_dim) + split_heads(self.kv(context), [h, h], self.head_dim)

    def forward(self, queries: Tensor, context: Tensor) -> Tensor:
        q, k, v = self._heads(queries, context)
        return self._output(F.scaled_dot_product_attention(q, k, v, dropout_p=self._dropout_p()))

    def forward_with_maps(self, queries: Tensor, context: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v = self._heads(queries, context)
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        out = F.dropout(attn, self._dropout_p()) @ v
        return self._output(out), {"attn": attn}


class DenoisingCrossAttention(CrossAttention):
    """Denoising cross-attention (DnA, Campos et al., ECCV 2026) for probes, per head h:

        softmax(Q+_h K_h^T / sqrt d) V+_h + alpha_h * softmin(Q-_h K_h^T / sqrt d) V-_h

    Q+ (``q``) and Q- (``q_neg``) from the queries; K, V+ (``kv``) and V- (``v_neg``) from the
    context; alpha (``neg_scalers``) one unconstrained scalar per head; one output projection.
    The negative branch is ADDED (the reference TimeSformer's sign; VisCoP subtracts: the same
    model up to the sign of V-). One GEMM for [Q+; Q-] over the queries, one for [K; V+; V-]
    over the context, then :func:`~.core.dna_attention`.

    Args:
        dim: token width D.
        num_heads: number of heads H.
        qkv_bias: bias on every query, key and value projection.
        attn_drop: dropout on both attention maps; keep 0 for speed.
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
        self.q_neg = nn.Linear(dim, dim, bias=qkv_bias)
        self.v_neg = nn.Linear(dim, dim, bias=qkv_bias)
        self.neg_scalers = nn.Parameter(torch.full((num_heads,), float(alpha_init)))

    def alpha(self) -> Tensor:
        """The per-head weight of the negative branch, (H,)."""
        return self.neg_scalers

    def _heads(self, queries: Tensor, context: Tensor) -> list[Tensor]:
        h, d = self.num_heads, self.head_dim
        q_bias = None if self.q.bias is None else torch.cat([self.q.bias, self.q_neg.bias])
        q_pos, q_neg = split_heads(F.linear(queries, torch.cat([self.q.weight, self.q_neg.weight]), q_bias), [h, h], d)
        kv_bias = None if self.kv.bias is None else torch.cat([self.kv.bias, self.v_neg.bias])
        k, v_pos, v_neg = split_heads(
            F.linear(context, torch.cat([self.kv.weight, self.v_neg.weight]), kv_bias), [h, h, h], d
        )
        return [q_pos, q_neg, k, v_pos, v_neg]

    def forward(self, queries: Tensor, context: Tensor) -> Tensor:
        out = dna_attention(*self._heads(queries, context), self.alpha(), scale=self.scale,
                            dropout_p=self._dropout_p())
        return self._output(out)

    def forward_with_maps(self, queries: Tensor, context: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        out, positive, negative = dna_attention_maps(*self._heads(queries, context), self.alpha(),
                                                     scale=self.scale, dropout_p=self._dropout_p())
        return self._output(out), {"positive": positive, "negative": negative}

    @torch.no_grad()
    def start_from(self, source: nn.Module, neg_init: str, eps: float) -> None:
        """Q+, K, V+ and the projection as :meth:`CrossAttention.start_from`; Q- and V- by
        ``neg_init`` (alpha kept unless ``copy``)."""
        super().start_from(source, neg_init, eps)
        d = self.dim
        if neg_init == "copy":
            missing = [name for name in ("q_neg", "v_neg", "neg_scalers") if not hasattr(source, name)]
            if missing:
                raise ValueError(
                    "neg_init 'copy' takes Q-, V- from a DnA self-attention, but the source uses "
                    f"{type(source).__name__} (no {', '.join(missing)}): choose random, scaled_copy or orthogonal"
                )
            self.q_neg.load_state_dict(source.q_neg.state_dict())
            self.v_neg.load_state_dict(source.v_neg.state_dict())
            self.neg_scalers.copy_(source.neg_scalers)
        elif neg_init == "scaled_copy":
            self.q_neg.weight.copy_(eps * self.q.weight)
            self.v_neg.weight.copy_(eps * self.kv.weight[d:])
            if self.q_neg.bias is not None:
                self.q_neg.bias.copy_(eps * self.q.bias)
                self.v_neg.bias.copy_(eps * self.kv.bias[d:])
        else:
            init_module(self.q_neg)
            init_module(self.v_neg)
            if neg_init == "orthogonal":
                self.v_neg.weight.copy_(orthogonal_complement_like(self.kv.weight[d:], self.num_heads))


# How DnA's Q-, V- start when a cross-attention is initialised from a self-attention:
#   random       trunc-normal(0.02), zero bias (the reference's fresh DnA weights);
#   scaled_copy  Q- = eps * Q+, V- = eps * V+ (weights and biases): VisCoP's choice, eps 1e-4;
#   orthogonal   Q- random; V- per head in the orthogonal complement of V+'s rows, at V+'s norm;
#   copy         Q-, V- and alpha from a DnA self-attention (a DnA backbone's own branch).
NEG_INIT_POLICIES = ("random", "scaled_copy", "orthogonal", "copy")


@torch.no_grad()
def init_from_self_attention(cross: CrossAttention, source: nn.Module, neg_init: str = "scaled_copy",
                             eps: float = 1e-4) -> None:
    """Set ``cross``'s projections from the self-attention ``source`` (same width, ``qkv`` rows
    [Q; K; V]): Q (Q+) from the query rows of ``source.qkv``, K and V (V+) from its key and
    value rows, the output projection from ``source.proj``; what else ``cross`` has it sets
    itself (:meth:`CrossAttention.start_from`: for DnA, Q- and V- by ``neg_init``, see
    :data:`NEG_INIT_POLICIES`, alpha kept unless ``copy``). With the same tokens as queries
    and context, the cross-attention then computes ``source`` (exactly for softmax, and for
    DnA with ``copy``).
    """
    if neg_init not in NEG_INIT_POLICIES:
        raise ValueError(f"unknown neg_init {neg_init!r}; choose one of {list(NEG_INIT_POLICIES)}")
    if (cross.dim, cross.num_heads) != (source.dim, source.num_heads):
        raise ValueError(
            f"cannot initialise a cross-attention of width {cross.dim} with {cross.num_heads} heads "
            f"from a self-attention of width {source.dim} with {source.num_heads} heads"
        )
    cross.start_from(source, neg_init, eps)
