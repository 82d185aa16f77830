"""The attention kinds of this toolkit, each behind :class:`~.base.Attention`. Which name
builds which class, and what the rest of the toolkit may ask of each, is stated once in
:mod:`.registry`. Formulations: ``shared/reference/dna.md``.

=================  ==========================================================================
kind               per head
=================  ==========================================================================
``softmax``        softmax(Q K^T/sqrt d) V (ViT's attention)
``dna``            softmax(Q+ K^T/sqrt d) V+ + alpha_h softmin(Q- K^T/sqrt d) V- (the paper)
``dna_shared_v``   (softmax(Q+ K^T/sqrt d) - alpha_h softmin(Q- K^T/sqrt d)) V: the reference's
                   shared-value ablation (one V, the negative branch subtracted)
``dna_tied_q``     softmax(Q K^T/sqrt d) V+ + alpha_h softmin(Q K^T/sqrt d) V-: DnA with Q- = Q+,
                   so the negative map weights the keys least similar to the positive query
``diff``           Differential Attention (Ye et al. 2024): (softmax(Q1 K1^T/sqrt d) - lambda
                   softmax(Q2 K2^T/sqrt d)) V, V of width 2d, per-head RMSNorm, x (1 - lambda_init)
``cog``            Cog Attention (Lv et al. 2024): (sign(p) * softmax(|p|)) V, p = Q K^T/sqrt d
=================  ==========================================================================
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from dna_video.models.attention.base import Attention, split_heads
from dna_video.models.attention.core import dna_attention, dna_attention_maps, dna_terms

__all__ = [
    "SoftmaxAttention",
    "DenoisingAttention",
    "SharedValueDnA",
    "TiedQueryDnA",
    "DifferentialAttention",
    "CogAttention",
    "diff_lambda_init",
]


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

    def _qkv(self, x: Tensor) -> list[Tensor]:
        # (B, L, 3D) -> three (B, H, L, d) views, no copy.
        return split_heads(self.qkv(x), [self.num_heads] * 3, self.head_dim)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self._qkv(x)
        if self._explicit(x):
            attn = torch.softmax(q @ (k.transpose(-2, -1) * self.scale), dim=-1)
            out = F.dropout(attn, self._dropout_p()) @ v
        else:
            # The kernel's output follows the query's (B, L, H, d) memory order: the merge of
            # the heads is a view.
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=self._dropout_p())
        return self._output(out)

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v = self._qkv(x)
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        out = F.dropout(attn, self._dropout_p()) @ v
        return self._output(out), {"attn": attn}


class _TwoBranchAttention(Attention):
    """What the DnA kinds share: ``qkv`` ([Q+; K; V+], ViT's layout), optionally their own
    negative query ``q_neg`` (else Q- = Q+) and negative value ``v_neg`` (else V- = V+), and
    ``neg_scalers`` (alpha, one per head), in that order (checkpoints and paired builds rely
    on it); per head, softmax(Q+ K^T/sqrt d) V+ + w_h softmin(Q- K^T/sqrt d) V- with the
    branch weight w_h = :meth:`branch_weight` (:mod:`.core` computes it). A kind is one
    subclass: its constructor (the arguments a config gives) and, if the negative branch is
    subtracted, :meth:`branch_weight`."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool, attn_drop: float, proj_drop: float,
                 alpha_init: float, negative_query: bool, negative_value: bool) -> None:
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        if negative_query:
            self.q_neg = nn.Linear(dim, dim, bias=qkv_bias)
        if negative_value:
            self.v_neg = nn.Linear(dim, dim, bias=qkv_bias)
        self.neg_scalers = nn.Parameter(torch.full((num_heads,), float(alpha_init)))

    def alpha(self) -> Tensor:
        """The per-head weight of the negative branch, (H,): ``neg_scalers`` as they are (a
        subclass may bound them)."""
        return self.neg_scalers

    def branch_weight(self) -> Tensor:
        """The signed per-head factor of the negative branch in the sum: alpha."""
        return self.alpha()

    def _heads(self, x: Tensor) -> tuple[Tensor, ...]:
        h = self.num_heads
        q_pos, k, v_pos = split_heads(self.qkv(x), [h] * 3, self.head_dim)
        q_neg = split_heads(self.q_neg(x), [h], self.head_dim)[0] if hasattr(self, "q_neg") else q_pos
        v_neg = split_heads(self.v_neg(x), [h], self.head_dim)[0] if hasattr(self, "v_neg") else v_pos
        return q_pos, q_neg, k, v_pos, v_neg

    def forward(self, x: Tensor) -> Tensor:
        out = dna_attention(*self._heads(x), self.branch_weight(), scale=self.scale, dropout_p=self._dropout_p(),
                            explicit=self._explicit(x))
        return self._output(out)

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        out, positive, negative = dna_attention_maps(*self._heads(x), self.branch_weight(), scale=self.scale,
                                                     dropout_p=self._dropout_p())
        return self._output(out), {"positive": positive, "negative": negative}

    def forward_with_terms(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Output and every term per head (:data:`~.core.TERMS`; ``out_negative`` is the
        branch as it is summed, w_h softmin(.) V-), written out."""
        terms = dna_terms(*self._heads(x), self.branch_weight(), scale=self.scale, dropout_p=self._dropout_p())
        return self._output(terms["out_positive"] + terms["out_negative"]), terms


class DenoisingAttention(_TwoBranchAttention):
    """Denoising Attention (DnA, Campos et al., ECCV 2026), per head h:

        softmax(Q+_h K_h^T / sqrt d) V+_h + alpha_h * softmin(Q-_h K_h^T / sqrt d) V-_h

    with softmin(z) = softmax(-z), the key K shared by both branches and one output
    projection after the sum (:mod:`.core`). Parameters use the reference layout: ``qkv`` (rows
    [Q+; K; V+], identical to ViT's ``qkv``), ``q_neg`` (Q-), ``v_neg`` (V-), ``proj``, and
    ``neg_scalers`` (one unconstrained scalar per head; alpha is :meth:`alpha`).

    Args:
        dim: token width D.
        num_heads: number of heads H.
        qkv_bias: bias on the Q+/K/V+ and Q-/V- projections.
        attn_drop: dropout on both attention maps (as in the reference); keep 0 for speed.
        proj_drop: dropout after the output projection.
        alpha_init: initial value of every ``neg_scalers`` entry (0.5 in the reference).
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
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop, alpha_init,
                         negative_query=True, negative_value=True)


class SharedValueDnA(_TwoBranchAttention):
    """Shared-value DnA (the reference's ablation), per head h:

        (softmax(Q+_h K_h^T / sqrt d) - alpha_h * softmin(Q-_h K_h^T / sqrt d)) V_h

    DnA without its own negative value (:mod:`.core` with V- = V and -alpha): ``qkv`` ([Q; K; V],
    ViT's), ``q_neg`` (Q-), ``proj`` and ``neg_scalers`` (alpha, one per head), the reference's
    names, so a softmax checkpoint maps onto all but Q- and alpha and a DnA one onto all but V-.

    Args:
        dim, num_heads, qkv_bias, attn_drop, proj_drop: as :class:`~.base.Attention`.
        alpha_init: initial value of every alpha_h.
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
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop, alpha_init,
                         negative_query=True, negative_value=False)

    def branch_weight(self) -> Tensor:
        """-alpha: the negative branch is subtracted."""
        return -self.alpha()


class TiedQueryDnA(_TwoBranchAttention):
    """DnA with the negative query tied to the positive one (Q- = Q+), per head h:

        softmax(Q_h K_h^T / sqrt d) V+_h + alpha_h * softmin(Q_h K_h^T / sqrt d) V-_h

    Both maps read the same scores: the negative map puts most weight on the keys LEAST
    similar to the query, the opposite of the positive map. With a free Q- (``dna``) a model
    can learn Q- = -Q+, which makes softmin(Q- K^T) one more softmax over the same keys; tied,
    it cannot (its ``query_negative`` term is -Q+). Parameters: ``qkv`` ([Q; K; V+], ViT's),
    ``v_neg`` (V-), ``proj`` and ``neg_scalers`` (alpha, one per head): a softmax checkpoint
    maps onto all but V- and alpha, a DnA one onto all but Q- (left unused).

    Args:
        dim, num_heads, qkv_bias, attn_drop, proj_drop: as :class:`~.base.Attention`.
        alpha_init: initial value of every alpha_h.
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
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop, alpha_init,
                         negative_query=False, negative_value=True)


def diff_lambda_init(layer_index: int) -> float:
    """Differential Attention's lambda_init for the block with 1-based index ``layer_index``:
    0.8 - 0.6 exp(-0.3 (l - 1)) (the paper's formula; its code's 0-based index without -1)."""
    if layer_index < 1:
        raise ValueError(f"layer_index is 1-based, got {layer_index}")
    return 0.8 - 0.6 * math.exp(-0.3 * (layer_index - 1))


class DifferentialAttention(Attention):
    """Differential Attention (Ye et al., arXiv 2410.05258) as published.

    With H the configured ``num_heads`` and d = D / H: H / 2 differential heads (so the
    parameter count matches softmax attention), each with two query/key pairs of width d and
    one value of width 2d. Per head:

        (softmax(Q1 K1^T / sqrt d) - lambda softmax(Q2 K2^T / sqrt d)) V
        -> RMSNorm over 2d (eps 1e-5, affine) -> x (1 - lambda_init)

    then the heads are concatenated and go through ``proj``. lambda = exp(lq1 . lk1) -
    exp(lq2 . lk2) + lambda_init, four learnable vectors of width d drawn from N(0, 0.1), one
    lambda shared by the heads of the module; lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)) for
    block l = 1..L (:func:`diff_lambda_init`). The query, key and value projections have no
    bias whatever ``qkv_bias`` says (as published); ``proj`` keeps its bias.

    Layout (the reference code's, and timm's ``DiffAttention``): ``qkv`` Linear(D, 3D) with
    rows [Q; K; V]; Q and K are 2 * (H/2) groups of d channels, group 2h + m being map m of
    head h; V is H/2 groups of 2d channels. Parameter names are timm's (``lambda_q1``,
    ``lambda_k1``, ``lambda_q2``, ``lambda_k2``, ``sub_norm``), so timm ``attn_layer='diff'``
    weights load by name.

    The formula is stated once (:meth:`_terms`) and every path applies it: the fused kernels
    want the value as wide as the query, so V is split into its two halves of width d and each
    map is applied to each half (four calls), the formula on the two outputs; for short
    sequences explicit batched matmuls, the formula on the two maps (one product with V);
    :meth:`forward_with_terms` and :meth:`forward_with_maps` keep every term.

    Args:
        dim: token width D.
        num_heads: the softmax baseline's head count H (even); H / 2 differential heads.
        qkv_bias: ignored (no bias on Q, K, V, as published); kept for the common interface.
        attn_drop: dropout on both attention maps.
        proj_drop: dropout after the output projection.
        layer_index: the block's 1-based index l (both attentions of a TimeSformer block share it).
        num_layers: number of blocks (not used; part of the depth interface).
        lambda_std: std of the lambda vectors' normal initialisation.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        layer_index: int = 1,
        num_layers: int = 0,
        lambda_std: float = 0.1,
    ) -> None:
        super().__init__(dim, num_heads, False, attn_drop, proj_drop)
        if num_heads % 2:
            raise ValueError(f"diff attention halves the heads: num_heads={num_heads} must be even")
        self.diff_heads = num_heads // 2
        self.layer_index = layer_index
        self.lambda_init = diff_lambda_init(layer_index)
        d = self.head_dim
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.lambda_q1 = nn.Parameter(torch.empty(d))
        self.lambda_k1 = nn.Parameter(torch.empty(d))
        self.lambda_q2 = nn.Parameter(torch.empty(d))
        self.lambda_k2 = nn.Parameter(torch.empty(d))
        for vector in (self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2):
            nn.init.normal_(vector, mean=0.0, std=lambda_std)
        self.sub_norm = nn.RMSNorm(2 * d, eps=1e-5)

    def lambda_full(self) -> Tensor:
        """lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init (a scalar)."""
        return (
            torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))
            - torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))
            + self.lambda_init
        )

    def _heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """queries, keys (B, 2, H/2, L, d): map m of head h; values (B, H/2, L, 2d)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        split = "b l (h m d) -> b m h l d"
        queries = rearrange(q, split, m=2, d=self.head_dim)
        keys = rearrange(k, split, m=2, d=self.head_dim)
        return queries, keys, rearrange(v, "b l (h d) -> b h l d", h=self.diff_heads)

    def _finish(self, out: Tensor) -> Tensor:
        """(B, H/2, L, 2d) differential output -> per-head RMSNorm, (1 - lambda_init), proj."""
        # In the norm weight's dtype: under bf16 autocast the kernel wants both dtypes equal.
        out = self.sub_norm(out.to(self.sub_norm.weight.dtype)).to(out.dtype) * (1.0 - self.lambda_init)
        return self._output(out)

    def _maps(self, queries: Tensor, keys: Tensor) -> Tensor:
        """Both maps of every differential head, softmax(Q_m K_m^T / sqrt d), as (B, 2, H/2, L, S)
        (map m = 0, 1 on the second axis): one batched product and softmax."""
        return torch.softmax(queries @ (keys.transpose(-2, -1) * self.scale), dim=-1)

    def _terms(self, first: Tensor, second: Tensor) -> tuple[Tensor, Tensor]:
        """The formula, stated once: its two terms, ``first`` and -lambda ``second``, whose sum
        is the head's output before the norm when they are the two maps' outputs. Every path
        goes through here: on the two maps (the combined map, which then multiplies V: the
        explicit path), on their outputs (the fused kernels, and the written-out terms)."""
        return first, -self.lambda_full() * second

    def _combined(self, first: Tensor, second: Tensor) -> Tensor:
        positive, negative = self._terms(first, second)
        return positive + negative

    def forward(self, x: Tensor) -> Tensor:
        queries, keys, v = self._heads(x)
        p = self._dropout_p()
        if self._explicit(x):
            maps = F.dropout(self._maps(queries, keys), p)
            out = self._combined(maps[:, 0], maps[:, 1]) @ v  # one product with V: the map is what backward keeps
        else:
            halves = v.chunk(2, dim=-1)  # equal head widths for the fused kernels
            per_map = [
                torch.cat([F.scaled_dot_product_attention(queries[:, m], keys[:, m], half, dropout_p=p)
                           for half in halves], dim=-1)
                for m in (0, 1)
            ]
            out = self._combined(per_map[0], per_map[1])
        return self._finish(out)

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        out, terms = self.forward_with_terms(x)
        first, second = terms["positive"], terms["negative"]
        return out, {"positive": first, "negative": second, "combined": self._combined(first, second)}

    def forward_with_terms(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Output and every term per differential head (:data:`~.core.TERMS`, H/2 heads, values
        2d wide): the maps of Q1 K1 and Q2 K2, ``query_negative`` = Q2 (the second map is a
        softmax, over keys K2 of its own), ``out_negative`` = -lambda softmax(Q2 K2^T) V, both
        outputs before the per-head norm."""
        queries, keys, v = self._heads(x)
        maps = self._maps(queries, keys)
        outputs = F.dropout(maps, self._dropout_p()) @ v[:, None]  # (B, 2, H/2, L, 2d)
        positive, negative = self._terms(outputs[:, 0], outputs[:, 1])
        terms = {
            "positive": maps[:, 0], "negative": maps[:, 1], "query_positive": queries[:, 0],
            "query_negative": queries[:, 1], "out_positive": positive, "out_negative": negative,
        }
        return self._finish(positive + negative), terms


class CogAttention(Attention):
    """Cog Attention (Lv et al., arXiv 2411.07176): weights sign(p) * softmax(|p|) with
    p = Q K^T / sqrt d, so the absolute weights of a row sum to 1 and each keeps the sign of
    its score; no parameters beyond softmax attention's (``qkv``, ``proj``), so softmax
    checkpoints map one to one.

    As published the first and last blocks keep plain softmax (``cog_softmax_ends``; in a
    TimeSformer both attentions of those blocks). The training path of a cog module
    materialises the (L x L) map: no fused kernel computes softmax(|p|) with signs; a module
    that keeps softmax uses the fused kernel as :class:`SoftmaxAttention`.

    Args:
        dim, num_heads, qkv_bias, attn_drop, proj_drop: as :class:`~.base.Attention`.
        layer_index: the block's 1-based index.
        num_layers: number of blocks (0: unknown, cog everywhere).
        cog_softmax_ends: plain softmax in the first and last blocks.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        layer_index: int = 1,
        num_layers: int = 0,
        cog_softmax_ends: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.layer_index = layer_index
        # The first and last blocks keep softmax when cog_softmax_ends (as published).
        self.keeps_softmax = bool(cog_softmax_ends and num_layers and layer_index in (1, num_layers))

    def _heads(self, x: Tensor) -> list[Tensor]:
        return split_heads(self.qkv(x), [self.num_heads] * 3, self.head_dim)

    def _weights(self, scores: Tensor) -> Tensor:
        if self.keeps_softmax:
            return torch.softmax(scores, dim=-1)
        return torch.sign(scores) * torch.softmax(scores.abs(), dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self._heads(x)
        p = self._dropout_p()
        if self.keeps_softmax and not self._explicit(x):
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        else:
            out = F.dropout(self._weights(q @ (k.transpose(-2, -1) * self.scale)), p) @ v
        return self._output(out)

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v = self._heads(x)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if self.keeps_softmax:
            weights = torch.softmax(scores, dim=-1)
        else:
            magnitude = scores.abs()
            e = torch.exp(magnitude - magnitude.amax(-1, keepdim=True))
            weights = torch.sign(scores) * (e / e.sum(-1, keepdim=True))
        out = F.dropout(weights, self._dropout_p()) @ v
        return self._output(out), {"attn": weights}
