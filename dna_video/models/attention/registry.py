"""The attention registry: every attention kind, and what the rest of the toolkit may ask of
it, stated in one place.

A kind is an :class:`AttentionKind`: its name (the config string), its self-attention class,
and the facts other parts need: the parameters it adds to softmax attention's ``qkv`` /
``proj`` and how a model's copy starts when a checkpoint lacks them (checkpoint import), its
negative branch if it has one (the weight, a switch to turn it off, its maps; the analysis and
the denoising experiment), whether it takes the block's depth, its cross-attention (probes),
whether timm model names are registered for it (image ViT), whether the DnA reference
TimeSformer has it (export) and which of its maps hold signed weights (figures, rollout). The
rest of the toolkit asks the kind (:func:`attention_kind`, :func:`kind_of`) and never checks a
class.

A new kind is one :func:`register_attention` call, from anywhere (your own module, a test):

    register_attention(AttentionKind("my_dna", MyDnA, "DnA with ...", extras=DNA_EXTRAS,
                                     negative=NegativeBranch()))

The kinds of this package are registered at the bottom of this module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch
from torch import Tensor, nn

from dna_video.models.init import init_module
from dna_video.models.attention.base import Attention
from dna_video.models.attention.cross import CrossAttention, DenoisingCrossAttention, SoftmaxCrossAttention
from dna_video.models.attention.kinds import (
    CogAttention,
    DenoisingAttention,
    DifferentialAttention,
    SharedValueDnA,
    SoftmaxAttention,
    TiedQueryDnA,
)

__all__ = [
    "AttentionKind",
    "CheckpointExtra",
    "NegativeBranch",
    "ATTENTIONS",
    "register_attention",
    "attention_kind",
    "attention_kinds",
    "kind_of",
    "negative_branch_weights",
    "build_attention",
    "build_cross_attention",
    "cross_attention_kind",
    "cross_attention_kinds",
    "kwargs_by_kind",
    "on_register",
    "DNA_EXTRAS",
    "DEFAULT_ATTENTION",
]


@dataclass(frozen=True)
class CheckpointExtra:
    """A parameter a kind adds to softmax attention's ``qkv`` / ``proj`` (by its name inside
    the attention module, e.g. ``q_neg``).

    Args:
        part: the part of the method it belongs to (the import report names it).
        init: how the model's tensor starts when a checkpoint lacks it: ``dna_init`` (the
            import's DnA policy for Q-, V-), ``alpha_init`` (the model's initial alpha), or
            ``own`` (the module's own initialisation, described by ``how``).
        how: the report's words for ``own``.
    """

    part: str
    init: Literal["dna_init", "alpha_init", "own"] = "own"
    how: str = "the model's own initialisation"


@dataclass(frozen=True)
class NegativeBranch:
    """A kind's negative branch: the part that switching it off removes.

    Args:
        weight: the module's method returning the branch's weight (alpha per head, or diff's
            scalar lambda); switching the branch off makes it return zeros.
        query: the module's Linear of the negative query (Q-), or None.
        value: the module's Linear of the negative value (V-), or None when V is shared.
        maps: the names of the positive and the negative map in ``forward_with_maps``.
        terms: the module's method returning its output and every term per head
            (:data:`~.core.TERMS`: both maps, both queries as softmax queries, each branch's
            signed output), for the mechanism measures; None when it has none.
    """

    weight: str = "alpha"
    query: str | None = "q_neg"
    value: str | None = "v_neg"
    maps: tuple[str, str] = ("positive", "negative")
    terms: str | None = "forward_with_terms"

    def weight_of(self, module: nn.Module) -> Tensor:
        return getattr(module, self.weight)()

    def has_terms(self, module: nn.Module) -> bool:
        """Whether ``module`` offers :meth:`terms_of` (its class has the declared method)."""
        return self.terms is not None and callable(getattr(module, self.terms, None))

    def terms_of(self, module: nn.Module, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """``module``'s output on ``x`` and its terms per head (:data:`~.core.TERMS`)."""
        if not self.has_terms(module):
            raise ValueError(f"{type(module).__name__} has no per-head terms method ({self.terms!r}): "
                             "declare NegativeBranch(terms=...) for its kind")
        return getattr(module, self.terms)(x)

    @contextmanager
    def off(self, module: nn.Module) -> Iterator[None]:
        """Inside: ``module``'s branch weight is 0 (an instance attribute shadows the method)."""
        zero = torch.zeros_like(self.weight_of(module)).detach()
        setattr(module, self.weight, lambda: zero)
        try:
            yield
        finally:
            delattr(module, self.weight)


@dataclass(frozen=True)
class AttentionKind:
    """One attention kind and what the toolkit may ask of it.

    Args:
        name: the config string (``attention: NAME``).
        module: its self-attention class, ``(dim, num_heads, qkv_bias, attn_drop, proj_drop,
            **its own arguments)``, an :class:`~.base.Attention`.
        description: one line for listings and ``--help``.
        extras: parameters it adds to softmax attention's, by name (checkpoint import).
        negative: its negative branch, if it has one.
        takes_depth: its constructor takes ``layer_index`` (1-based) and ``num_layers``.
        cross: its cross-attention class (probes), if it has one.
        timm: timm model names ``vit_{tiny,small,base}_patch16_224_NAME`` are registered.
        in_reference: the DnA reference TimeSformer has it (export to its ``.pyth``).
        all_blocks_kwargs: arguments that make every block of a shallow model use the kind
            (benchmarks at depth 2).
        heads_from_state: the head count from a checkpoint's tensors of one module
            (``state``, key prefix, width), when they tell it.
        signed_maps: the maps of its ``forward_with_maps`` whose weights can be negative
            (not probabilities): figures draw them on a scale centred at 0 and attention
            rollout refuses them.
    """

    name: str
    module: type[Attention]
    description: str = ""
    extras: Mapping[str, CheckpointExtra] = field(default_factory=dict)
    negative: NegativeBranch | None = None
    takes_depth: bool = False
    cross: type[CrossAttention] | None = None
    timm: bool = True
    in_reference: bool = False
    all_blocks_kwargs: Mapping[str, Any] = field(default_factory=dict)
    heads_from_state: Callable[[Mapping[str, Tensor], str, int], int | None] | None = None
    signed_maps: tuple[str, ...] = ()


_KINDS: dict[str, AttentionKind] = {}
_NAMES: dict[str, type[Attention]] = {}
#: Kind name -> self-attention class, read-only; :func:`register_attention` adds to it.
ATTENTIONS: Mapping[str, type[Attention]] = MappingProxyType(_NAMES)
_LISTENERS: list[Callable[[AttentionKind], None]] = []


def register_attention(kind: AttentionKind, *, replace: bool = False) -> AttentionKind:
    """Register ``kind`` (its name must be new unless ``replace``); returns it."""
    if not kind.name.isidentifier():
        raise ValueError(f"attention kind name {kind.name!r} must be an identifier (it goes in timm names)")
    if not (isinstance(kind.module, type) and issubclass(kind.module, Attention)):
        raise TypeError(f"attention kind {kind.name!r}: module must be a subclass of Attention")
    if kind.name in _KINDS and not replace:
        raise ValueError(f"attention kind {kind.name!r} is already registered (pass replace=True)")
    _KINDS[kind.name] = kind
    _NAMES[kind.name] = kind.module
    for listener in list(_LISTENERS):
        listener(kind)
    return kind


def on_register(listener: Callable[[AttentionKind], None]) -> None:
    """Call ``listener`` for every kind registered so far and every kind registered later
    (how :mod:`dna_video.models.vit` names timm models for kinds registered after it)."""
    _LISTENERS.append(listener)
    for kind in list(_KINDS.values()):
        listener(kind)


def attention_kind(name: str) -> AttentionKind:
    """The kind named ``name``; a ValueError listing the kinds otherwise."""
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown attention {name!r}; choose one of {sorted(_KINDS)}") from None


def attention_kinds() -> tuple[str, ...]:
    """Names of the registered kinds, in registration order."""
    return tuple(_KINDS)


def kind_of(module: nn.Module) -> AttentionKind | None:
    """The kind of an attention or cross-attention module (its class, or the nearest
    registered base class); None for a module of no registered kind."""
    for cls in type(module).__mro__:
        for kind in reversed(list(_KINDS.values())):  # a later registration of a subclass wins
            if kind.module is cls or kind.cross is cls:
                return kind
    return None


def negative_branch_weights(net: nn.Module) -> dict[str, Tensor]:
    """The negative branch's weight (DnA's alpha per head, diff's lambda) of every attention
    module of ``net`` whose kind has one, by module name."""
    weights = {}
    for name, module in net.named_modules():
        kind = kind_of(module)
        if kind is not None and kind.negative is not None:
            weights[name] = kind.negative.weight_of(module)
    return weights


def kwargs_by_kind(kinds: Iterable[str], kwargs: dict[str, Any] | None,
                   where: str = "attention_kwargs") -> dict[str, dict[str, Any]]:
    """Split one ``attention_kwargs`` dict between the attention kinds in use: each kind gets
    the entries its constructor takes (e.g. ``alpha_init`` for dna in the spatial path,
    ``cog_softmax_ends`` for cog in the temporal one). An entry no kind in use takes is an
    error naming it (a typo must not pass silently)."""
    kwargs = dict(kwargs or {})
    kinds = list(dict.fromkeys(kinds))
    accepted = {kind: set(inspect.signature(attention_kind(kind).module).parameters) for kind in kinds}
    unused = [key for key in kwargs if not any(key in names for names in accepted.values())]
    if unused:
        raise ValueError(
            f"{where}: {unused} not taken by the attention in use ({', '.join(kinds)}); "
            f"remove it or choose an attention that takes it"
        )
    return {kind: {k: v for k, v in kwargs.items() if k in accepted[kind]} for kind in kinds}


def build_attention(
    kind: str,
    dim: int,
    num_heads: int,
    qkv_bias: bool = True,
    attn_drop: float = 0.0,
    proj_drop: float = 0.0,
    layer_index: int = 1,
    num_layers: int = 0,
    **kwargs: Any,
) -> Attention:
    """Build the attention module of ``kind`` (a registered name). Extra keyword arguments go to
    that implementation only (e.g. ``alpha_init`` for ``"dna"``); passing one that it does not
    take is an error. ``layer_index`` (the block's 1-based index) and ``num_layers`` reach the
    kinds that take the depth."""
    spec = attention_kind(kind)
    if spec.takes_depth:
        kwargs.update(layer_index=layer_index, num_layers=num_layers)
    return spec.module(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop, **kwargs)


def cross_attention_kinds() -> tuple[str, ...]:
    """Names of the registered kinds that have a cross-attention (:attr:`AttentionKind.cross`)."""
    return tuple(name for name, kind in _KINDS.items() if kind.cross is not None)


def cross_attention_kind(name: str) -> AttentionKind:
    """The kind named ``name`` if it has a cross-attention; a ValueError listing those otherwise."""
    spec = _KINDS.get(name)
    if spec is None or spec.cross is None:
        raise ValueError(f"unknown cross-attention {name!r}; choose one of {sorted(cross_attention_kinds())} "
                         "(an attention kind registered with a `cross` class)")
    return spec


def build_cross_attention(
    kind: str,
    dim: int,
    num_heads: int,
    qkv_bias: bool = True,
    attn_drop: float = 0.0,
    proj_drop: float = 0.0,
    *,
    offered: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> CrossAttention:
    """Build the cross-attention of ``kind``, Linear layers initialised as the TimeSformer's
    (trunc-normal 0.02, zero bias). Extra keyword arguments go to that implementation only
    (e.g. ``alpha_init`` for ``"dna"``); ``offered`` ones only if its constructor takes them
    (a caller's options that some kinds have no use for, e.g. the probe's ``alpha_init``)."""
    spec = cross_attention_kind(kind)
    takes = inspect.signature(spec.cross).parameters
    kwargs = {**{k: v for k, v in (offered or {}).items() if k in takes}, **kwargs}
    module = spec.cross(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop, **kwargs)
    module.apply(init_module)
    return module


# -- the kinds of this package --------------------------------------------------------------------
#: DnA's parameters beyond softmax attention's (the reference's names).
DNA_EXTRAS = MappingProxyType({
    "q_neg": CheckpointExtra("negative branch", "dna_init"),
    "v_neg": CheckpointExtra("negative branch", "dna_init"),
    "neg_scalers": CheckpointExtra("negative branch", "alpha_init"),
})
_LAMBDA = CheckpointExtra("differential lambda", how="Differential Attention's lambda vector: N(0, 0.1), the model's own")


def _heads_from_alpha(state: Mapping[str, Tensor], prefix: str, dim: int) -> int | None:
    scalers = state.get(prefix + "neg_scalers")
    return int(scalers.shape[0]) if scalers is not None else None


def _heads_from_lambda(state: Mapping[str, Tensor], prefix: str, dim: int) -> int | None:
    vector = state.get(prefix + "lambda_q1")  # width D / H
    return dim // int(vector.shape[0]) if vector is not None and dim else None


register_attention(AttentionKind(
    "softmax", SoftmaxAttention, "softmax(Q K^T/sqrt d) V, ViT's attention",
    cross=SoftmaxCrossAttention, timm=False, in_reference=True,
))
register_attention(AttentionKind(
    "dna", DenoisingAttention, "Denoising Attention: a positive and a negative (softmin) branch over shared keys",
    extras=DNA_EXTRAS, negative=NegativeBranch(), cross=DenoisingCrossAttention, in_reference=True,
    heads_from_state=_heads_from_alpha,
))
#: The kind a network uses unless its configuration names another: the paper's DnA. Every
#: default attention argument of the package reads it (tests/test_defaults.py).
DEFAULT_ATTENTION = "dna"
register_attention(AttentionKind(
    "dna_shared_v", SharedValueDnA, "DnA with one V, the negative branch subtracted (the reference's ablation)",
    extras={k: v for k, v in DNA_EXTRAS.items() if k != "v_neg"}, negative=NegativeBranch(value=None),
    heads_from_state=_heads_from_alpha,
))
register_attention(AttentionKind(
    "dna_tied_q", TiedQueryDnA, "DnA with Q- tied to Q+: softmin attends to the keys least similar to the query",
    extras={k: v for k, v in DNA_EXTRAS.items() if k != "q_neg"}, negative=NegativeBranch(query=None),
    heads_from_state=_heads_from_alpha,
))
register_attention(AttentionKind(
    "diff", DifferentialAttention, "Differential Attention (Ye et al. 2024)",
    extras={
        "lambda_q1": _LAMBDA, "lambda_k1": _LAMBDA, "lambda_q2": _LAMBDA, "lambda_k2": _LAMBDA,
        "sub_norm": CheckpointExtra("differential per-head norm",
                                    how="Differential Attention's per-head RMSNorm: ones, the model's own"),
    },
    negative=NegativeBranch(weight="lambda_full", query=None, value=None), takes_depth=True,
    heads_from_state=_heads_from_lambda, signed_maps=("combined",),
))
register_attention(AttentionKind(
    "cog", CogAttention, "Cog Attention (Lv et al. 2024): signed weights sign(p) softmax(|p|)",
    takes_depth=True, all_blocks_kwargs={"cog_softmax_ends": False}, signed_maps=("attn",),
))
