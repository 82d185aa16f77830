"""Visual probes on a frozen TimeSformer: a few learned query tokens read the encoder layer by
layer (the VisCoP integration of DnA; Campos et al., ECCV 2026).

For every selected block of the frozen backbone an interaction module lets the probes
cross-attend the tokens leaving that block (softmax or DnA cross-attention,
:mod:`dna_video.models.attention`); its output REPLACES the probes (VisCoP: no residual, no
MLP), or, with ``interaction="residual"``, is added to them and followed by an MLP. The
probes go on to the next selected block; the final probes are averaged and classified.

Each interaction module starts from the matching backbone block: its cross-attention from the
block's spatial attention (Q+ from q, K from k, V+ from v, output projection from proj; Q-,
V- by a policy), its two LayerNorms (over the probes and over the block's tokens) from the
block's ``norm1``, and in the residual form its MLP from the block's MLP. The LayerNorm over
the probes also keeps the probes apart at the start: from N(0, 0.02) tokens a query
projection gives near-zero queries, uniform attention and identical probes.

The backbone runs in eval mode without building a graph: only the probes, the interaction
modules and the head train, and training memory holds no backbone activations.
The module knows nothing of Lightning; :class:`dna_video.tasks.ProbeClassifierModule` trains it
(``dna-video fit --config probe_quickstart``).
"""

from __future__ import annotations

from typing import Literal

import torch
from einops import reduce, repeat
from timm.layers import trunc_normal_
from torch import Tensor, nn

from dna_video.models.mlp import Mlp
from dna_video.models.attention import (
    DEFAULT_ATTENTION,
    NEG_INIT_POLICIES,
    CrossAttention,
    build_cross_attention,
    cross_attention_kind,
    init_from_self_attention,
)
from dna_video.models.init import init_module
from dna_video.models.timesformer import DividedSpaceTimeBlock, TimeSformer

__all__ = ["ProbeInteraction", "ProbeClassifier", "resolve_layers"]


def resolve_layers(layers: list[int] | None, depth: int) -> list[int]:
    """Selected block indices, ascending and 0-based; None means every block, negative
    indices count from the end (-1: the last block)."""
    if layers is None:
        return list(range(depth))
    if not layers:
        raise ValueError("probe_layers is empty: give block indices, or null for every block")
    bad = [i for i in layers if not -depth <= i < depth]
    if bad:
        raise ValueError(f"probe_layers {bad} out of range for a backbone of depth {depth} (use 0..{depth - 1} or -1..-{depth})")
    resolved = sorted({i % depth for i in layers})
    if len(resolved) != len(layers):
        raise ValueError(f"probe_layers {layers} names a block twice")
    return resolved


class ProbeInteraction(nn.Module):
    """The probes cross-attend one block's tokens.

    ``replace``: probes <- attn(norm_probes(probes), norm_context(tokens)).
    ``residual``: probes <- probes + attn(...), then probes <- probes + mlp(norm2(probes)).

    Args:
        dim: token width D.
        num_heads: attention heads.
        cross_attention: an attention kind with a cross-attention (``dna``, ``softmax``, or any
            kind registered with a ``cross`` class).
        interaction: ``replace`` (VisCoP) or ``residual``.
        mlp_ratio: MLP hidden width / D (residual form).
        qkv_bias: bias on the query/key/value projections.
        norm_eps: LayerNorm epsilon.
        alpha_init: initial alpha per head, for a cross-attention that takes ``alpha_init``
            (DnA's); the others ignore it.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        cross_attention: str = DEFAULT_ATTENTION,
        interaction: Literal["replace", "residual"] = "replace",
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        norm_eps: float = 1e-6,
        alpha_init: float = 0.5,
    ) -> None:
        super().__init__()
        if interaction not in ("replace", "residual"):
            raise ValueError(f"unknown interaction {interaction!r}: use replace or residual")
        self.interaction = interaction
        self.norm_probes = nn.LayerNorm(dim, eps=norm_eps)
        self.norm_context = nn.LayerNorm(dim, eps=norm_eps)
        self.attn: CrossAttention = build_cross_attention(cross_attention, dim, num_heads, qkv_bias=qkv_bias,
                                                          offered={"alpha_init": alpha_init})
        if interaction == "residual":
            self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
            self.mlp = Mlp(dim, hidden_features=int(dim * mlp_ratio))
            self.mlp.apply(init_module)

    def forward(self, probes: Tensor, tokens: Tensor) -> Tensor:
        """probes (B, P, D), tokens (B, L, D) -> new probes (B, P, D)."""
        out = self.attn(self.norm_probes(probes), self.norm_context(tokens))
        if self.interaction == "replace":
            return out
        probes = probes + out
        return probes + self.mlp(self.norm2(probes))

    @torch.no_grad()
    def init_from_block(self, block: DividedSpaceTimeBlock, neg_init: str = "scaled_copy", eps: float = 1e-4) -> None:
        """Copy the block's spatial attention, ``norm1`` (into both norms) and, in the residual
        form, ``norm2`` and MLP; DnA's Q-, V- by ``neg_init``."""
        init_from_self_attention(self.attn, block.attn, neg_init, eps)
        self.norm_probes.load_state_dict(block.norm1.state_dict())
        self.norm_context.load_state_dict(block.norm1.state_dict())
        if self.interaction == "residual":
            self.norm2.load_state_dict(block.norm2.state_dict())
            self.mlp.load_state_dict(block.mlp.state_dict())


class ProbeClassifier(nn.Module):
    """Learned probes over a frozen TimeSformer, then a classification head.

    Args:
        backbone: the encoder; frozen here (``requires_grad`` off, always in eval mode, run
            under ``torch.no_grad``). Its own head is not used.
        num_classes: classes of the head.
        num_probes: probe tokens P (16 in VisCoP), initialised N(0, 0.02).
        layers: backbone blocks read by the probes (0-based, negative from the end); None:
            every block, as VisCoP's default.
        cross_attention: the cross-attention of the interaction modules: an attention kind
            with one (``dna``, ``softmax``, or any kind registered with a ``cross`` class).
        interaction: ``replace`` (the cross-attention output replaces the probes, VisCoP) or
            ``residual`` (residual + MLP).
        init_from_backbone: start each interaction module from the matching block (see the
            module docstring); False: fresh initialisation.
        neg_init: DnA's Q-, V- when starting from the backbone: ``scaled_copy`` (eps * Q+,
            eps * V+, VisCoP), ``random``, ``orthogonal`` or ``copy`` (a DnA backbone's own).
        neg_init_eps: eps of ``scaled_copy``.
        alpha_init: initial alpha per head of a cross-attention that takes one (DnA's; kept
            unless ``neg_init: copy``).
        head_dropout: dropout on the pooled probes before the head.
    """

    def __init__(
        self,
        backbone: TimeSformer,
        num_classes: int,
        num_probes: int = 16,
        layers: list[int] | None = None,
        cross_attention: str = DEFAULT_ATTENTION,
        interaction: Literal["replace", "residual"] = "replace",
        init_from_backbone: bool = True,
        neg_init: str = "scaled_copy",
        neg_init_eps: float = 1e-4,
        alpha_init: float = 0.5,
        head_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if num_probes < 1:
            raise ValueError(f"num_probes must be at least 1, got {num_probes}")
        if neg_init not in NEG_INIT_POLICIES:
            raise ValueError(f"unknown neg_init {neg_init!r}; choose one of {list(NEG_INIT_POLICIES)}")
        cross_attention_kind(cross_attention)  # an unknown name stops here, before the backbone is touched
        self.backbone = backbone.requires_grad_(False).eval()
        self.layers = resolve_layers(layers, len(backbone.blocks))
        dim = backbone.embed_dim
        first = backbone.blocks[0]
        self.probes = nn.Parameter(trunc_normal_(torch.empty(1, num_probes, dim), std=0.02))
        self.interactions = nn.ModuleList(
            ProbeInteraction(
                dim, first.attn.num_heads, cross_attention, interaction,
                mlp_ratio=first.mlp.fc1.out_features / dim, qkv_bias=first.attn.qkv.bias is not None,
                norm_eps=first.norm1.eps, alpha_init=alpha_init,
            )
            for _ in self.layers
        )
        if init_from_backbone:
            for i, module in zip(self.layers, self.interactions):
                module.init_from_block(backbone.blocks[i], neg_init, neg_init_eps)
        self.norm = nn.LayerNorm(dim, eps=first.norm1.eps)
        self.head_drop = nn.Dropout(head_dropout)
        self.head = nn.Linear(dim, num_classes)
        init_module(self.head)

    def train(self, mode: bool = True) -> "ProbeClassifier":
        super().train(mode)
        self.backbone.eval()  # fixed features: no dropout or drop-path, ever
        return self

    def forward_features(self, video: Tensor) -> Tensor:
        """(B, C, T, H, W) -> the final probes (B, P, D)."""
        with torch.no_grad():
            tokens = self.backbone.forward_intermediates(video, self.layers)
        probes = repeat(self.probes, "1 p d -> b p d", b=video.shape[0])
        for module, layer_tokens in zip(self.interactions, tokens):
            probes = module(probes, layer_tokens)
        return probes

    def forward_head(self, probes: Tensor) -> Tensor:
        pooled = reduce(probes, "b p d -> b d", "mean")
        return self.head(self.head_drop(self.norm(pooled)))

    def forward(self, video: Tensor) -> Tensor:
        """(B, C, T, H, W) -> logits (B, num_classes)."""
        return self.forward_head(self.forward_features(video))

    def attention_modules(self) -> dict[str, CrossAttention]:
        """Every cross-attention by its parameter-name prefix, e.g. ``interactions.0.attn``."""
        return {name: m for name, m in self.named_modules() if isinstance(m, CrossAttention)}

