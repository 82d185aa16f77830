"""TimeSformer with divided space-time attention, its attention injected (softmax or DnA).

Faithful to the official model's forward semantics (Bertasius et al., ICML 2021) and
parameter names, so that official, DnA-reference and Hugging Face checkpoints map onto it
by a small table:

* input (B, C, T, H, W); patch embedding per frame; tokens ordered space-major,
  time-minor (``b (n t) d`` with n = h*w patches), one cls token in front;
* each block: temporal attention over the patch tokens of one location, ``temporal_fc``
  (zero-initialised), residual; spatial attention within one frame with the cls token
  repeated per frame and its T outputs averaged, residual; MLP, residual;
* ``time_embed`` zero-initialised, so at initialisation the model is the image ViT;
* ``pos_embed`` / ``time_embed`` resampled at forward time when the input grid or frame
  count differs from the configured one.

The temporal and the spatial attention are chosen separately (``temporal_attention``,
``spatial_attention``; one ``attention`` sets both, DnA in the paper's model). The module
knows nothing of Lightning or datasets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar, Literal, get_args

import torch
import torch.nn.functional as F
from einops import rearrange, reduce, repeat
from timm.layers import DropPath, resample_abs_pos_embed, trunc_normal_
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from dna_video.common.defaults import IMG_SIZE, NUM_FRAMES
from dna_video.models.mlp import Mlp
from dna_video.models.attention import DEFAULT_ATTENTION, Attention, attention_kinds, build_attention, kwargs_by_kind
from dna_video.models.init import init_module
from dna_video.models.pairing import build_paired

__all__ = [
    "TimeSformer",
    "TimeSformerSpec",
    "DividedSpaceTimeBlock",
    "PRESETS",
    "CHECKPOINT_PARTS",
    "timesformer",
    "resample_pos_embed",
    "resample_time_embed",
    "init_module",
]

# Architecture presets: width, depth, heads and patch size. Everything else (frames,
# resolution, classes, attention) is chosen per experiment.
PRESETS: dict[str, dict[str, Any]] = {
    # CPU-sized: the quickstart and the tests.
    "tiny": dict(embed_dim=64, depth=4, num_heads=2, patch_size=8),
    # ViT-S/16 geometry.
    "small": dict(embed_dim=384, depth=12, num_heads=6, patch_size=16),
    # ViT-B/16 geometry: the paper's TimeSformer-B (8 x 224 x 224).
    "base": dict(embed_dim=768, depth=12, num_heads=12, patch_size=16),
}

#: What ``grad_checkpointing`` recomputes in backward: each chosen ``block`` whole (only its
#: input is kept), or only its two ``attention`` sublayers with their norms (the MLP keeps
#: its activations). Measured: ``python -m benchmarks --sections memory``.
CheckpointPart = Literal["block", "attention"]
CHECKPOINT_PARTS: tuple[str, ...] = get_args(CheckpointPart)


def resample_pos_embed(pos_embed: Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int], mode: str) -> Tensor:
    """``pos_embed`` (1, 1 + h*w, D), cls entry first and kept as is, resampled in 2-D from
    the patch grid ``old_grid`` to ``new_grid`` by ``mode`` (``nearest``, ``bilinear``,
    ``bicubic``; antialiased when it interpolates). Returned unchanged when the grids agree."""
    if tuple(new_grid) == tuple(old_grid):
        return pos_embed
    return resample_abs_pos_embed(
        pos_embed, list(new_grid), old_size=list(old_grid), num_prefix_tokens=1,
        interpolation=mode, antialias=mode in ("bilinear", "bicubic"),
    )


def resample_time_embed(time_embed: Tensor, num_frames: int, mode: str) -> Tensor:
    """``time_embed`` (1, T, D) resampled in 1-D to ``num_frames`` by ``mode`` (``linear``,
    half-pixel centres, or ``nearest``). Returned unchanged when T already is ``num_frames``."""
    if num_frames == time_embed.shape[1]:
        return time_embed
    # transpose, not einops: time_embed is a Parameter, and einops' first call on a new tensor
    # type makes torch.compile compile again.
    resampled = F.interpolate(
        time_embed.transpose(1, 2), size=num_frames,  # 1 t d -> 1 d t
        mode=mode, **({"align_corners": False} if mode == "linear" else {}),
    )
    return resampled.transpose(1, 2)  # 1 d t -> 1 t d


class PatchEmbed(nn.Module):
    """Per-frame patch embedding: a Conv2d with kernel = stride = patch size (``proj``)."""

    def __init__(self, patch_size: int, in_chans: int, embed_dim: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """(B*T, C, H, W) -> tokens (B*T, h*w, D) and the grid (h, w)."""
        x = self.proj(x)
        grid = (x.shape[-2], x.shape[-1])
        return rearrange(x, "bt d h w -> bt (h w) d"), grid


class DividedSpaceTimeBlock(nn.Module):
    """One divided space-time block: temporal attention, then spatial attention, then MLP.

    ``attn`` is of the kind ``attention``, ``temporal_attn`` of ``temporal_attention`` (the
    same when None). ``layer_index`` (1-based) and ``num_layers`` reach both attentions (the
    kinds that depend on depth, e.g. diff's lambda_init); ``attention_kwargs`` may hold
    arguments of both kinds, each gets those its constructor takes.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        attention: str,
        attention_kwargs: dict[str, Any],
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
        temporal_attention: str | None = None,
        layer_index: int = 1,
        num_layers: int = 0,
    ) -> None:
        super().__init__()
        temporal_attention = temporal_attention or attention
        kwargs = kwargs_by_kind([attention, temporal_attention], attention_kwargs)

        def make_attention(kind: str) -> Attention:
            return build_attention(
                kind, dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop,
                layer_index=layer_index, num_layers=num_layers, **kwargs[kind],
            )

        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = make_attention(attention)
        self.temporal_norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.temporal_attn = make_attention(temporal_attention)
        self.temporal_fc = nn.Linear(dim, dim)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, hidden_features=int(dim * mlp_ratio), drop=drop)

    def forward(self, x: Tensor, num_frames: int, recompute_attention: bool = False) -> Tensor:
        """x: (B, 1 + n*T, D), cls first, patches ordered ``(n t)``. ``recompute_attention``:
        keep only the inputs of the two attention sublayers (norm and attention) and recompute
        them in backward (activation checkpointing of the attention alone)."""
        t = num_frames
        cls, patches = x[:, :1], x[:, 1:]

        def attend(norm: nn.Module, attn: Attention, tokens: Tensor) -> Tensor:
            if recompute_attention and torch.is_grad_enabled():
                return checkpoint(_norm_attention, norm, attn, tokens, use_reentrant=False)
            return attn(norm(tokens))

        # Temporal attention: each spatial location attends over its T frames (no cls).
        xt = rearrange(patches, "b (n t) d -> (b n) t d", t=t)
        res = self.drop_path(attend(self.temporal_norm1, self.temporal_attn, xt))
        res = rearrange(res, "(b n) t d -> b (n t) d", b=x.shape[0])
        patches = patches + self.temporal_fc(res)

        # Spatial attention: each frame attends over its patches plus a copy of the cls token.
        xs = rearrange(patches, "b (n t) d -> (b t) n d", t=t)
        xs = torch.cat([repeat(cls, "b 1 d -> (b t) 1 d", t=t), xs], dim=1)
        res = self.drop_path(attend(self.norm1, self.attn, xs))
        res_cls = reduce(res[:, :1], "(b t) 1 d -> b 1 d", "mean", t=t)
        res_patches = rearrange(res[:, 1:], "(b t) n d -> b (n t) d", t=t)
        x = torch.cat([cls + res_cls, patches + res_patches], dim=1)

        return x + self.drop_path(self.mlp(self.norm2(x)))


def _norm_attention(norm: nn.Module, attn: Attention, tokens: Tensor) -> Tensor:
    return attn(norm(tokens))


class TimeSformer(nn.Module):
    """Divided space-time TimeSformer.

    Args:
        num_classes: size of the classification head (0: no head, logits = features).
        img_size: configured input height = width; other sizes work (pos_embed resampled).
        num_frames: configured clip length T; other lengths work (time_embed resampled).
        patch_size: square patch side.
        in_chans: input channels.
        embed_dim: token width D.
        depth: number of blocks.
        num_heads: attention heads per block.
        mlp_ratio: MLP hidden width / D.
        qkv_bias: bias on the attention projections.
        attention: attention kind of both paths (a registered kind,
            :func:`~dna_video.models.attention.attention_kinds`) unless ``temporal_attention`` /
            ``spatial_attention`` say otherwise.
        attention_kwargs: extra arguments of the attention kinds in use (e.g.
            ``{alpha_init: 0.5}``); each kind gets the ones its constructor takes.
        temporal_attention: attention kind of the temporal path (None: ``attention``).
        spatial_attention: attention kind of the spatial path (None: ``attention``).
        drop_rate: dropout inside MLP and after attention projections (0 in the recipes).
        attn_drop_rate: dropout on attention weights (keep 0: see :class:`Attention`).
        drop_path_rate: stochastic depth at the last block, linear from 0 over depth.
        head_drop_rate: dropout before the head (0.5 in the fine-tuning recipe).
        embed_interpolation: how pos/time embeddings are resampled at forward time when the
            input geometry differs from the configured one; ``nearest`` as the official
            TimeSformer and Hugging Face do.
        grad_checkpointing: activation checkpointing in training: keep less for backward and
            recompute it there (less memory, more time); which blocks and what part of them
            the next two arguments say.
        grad_checkpointing_every: recompute every k-th block (blocks 0, k, 2k, ...; 1: all).
        grad_checkpointing_part: ``block`` (the whole block, only its input kept) or
            ``attention`` (its two attention sublayers and their norms; the MLP keeps its
            activations), :data:`CHECKPOINT_PARTS`.
        norm_eps: LayerNorm epsilon (1e-6 in the official model; a Hugging Face config may
            state another).
    """

    def __init__(
        self,
        num_classes: int,
        img_size: int = IMG_SIZE,
        num_frames: int = NUM_FRAMES,
        patch_size: int = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        attention: str = DEFAULT_ATTENTION,
        attention_kwargs: dict[str, Any] | None = None,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        head_drop_rate: float = 0.0,
        embed_interpolation: str = "nearest",
        grad_checkpointing: bool = False,
        norm_eps: float = 1e-6,
        temporal_attention: str | None = None,
        spatial_attention: str | None = None,
        grad_checkpointing_every: int = 1,
        grad_checkpointing_part: CheckpointPart = "block",
    ) -> None:
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"img_size={img_size} is not a multiple of patch_size={patch_size}")
        if grad_checkpointing_every < 1:
            raise ValueError(f"grad_checkpointing_every={grad_checkpointing_every}: recompute every k-th block, k >= 1")
        if grad_checkpointing_part not in CHECKPOINT_PARTS:
            raise ValueError(f"grad_checkpointing_part={grad_checkpointing_part!r}: choose one of {list(CHECKPOINT_PARTS)}")
        self.num_classes = num_classes
        self.img_size = img_size
        self.num_frames = num_frames
        self.patch_size = patch_size
        self.embed_dim = embed_dim
        self.temporal_attention = temporal_attention or attention
        self.spatial_attention = spatial_attention or attention
        # One name when both paths agree (what checkpoint export and reports check), else both.
        self.attention = (
            self.spatial_attention if self.temporal_attention == self.spatial_attention
            else f"temporal={self.temporal_attention},spatial={self.spatial_attention}"
        )
        self.embed_interpolation = embed_interpolation
        # Plain attributes, read at every forward: a benchmark or a notebook may switch them.
        self.grad_checkpointing = grad_checkpointing
        self.grad_checkpointing_every = grad_checkpointing_every
        self.grad_checkpointing_part = grad_checkpointing_part
        self.grid = (img_size // patch_size, img_size // patch_size)

        self.patch_embed = PatchEmbed(patch_size, in_chans, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.grid[0] * self.grid[1], embed_dim))
        self.time_embed = nn.Parameter(torch.zeros(1, num_frames, embed_dim))
        self.pos_drop = nn.Dropout(drop_rate)

        dpr = torch.linspace(0, drop_path_rate, depth).tolist()
        self.blocks = nn.ModuleList(
            DividedSpaceTimeBlock(
                embed_dim, num_heads, self.spatial_attention, dict(attention_kwargs or {}),
                mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, drop=drop_rate,
                attn_drop=attn_drop_rate, drop_path=dpr[i], norm_eps=norm_eps,
                temporal_attention=self.temporal_attention, layer_index=i + 1, num_layers=depth,
            )
            for i in range(depth)
        )
        self.norm = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.head_drop = nn.Dropout(head_drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self.init_weights()

    def init_weights(self) -> None:
        """Official initialisation: trunc-normal(0.02) Linear weights and embeddings, zero
        biases, LayerNorm (1, 0); zero ``time_embed`` and zero ``temporal_fc`` in every block,
        so that at step 0 the temporal path adds nothing and the model is the image ViT."""
        trunc_normal_(self.pos_embed, std=0.02)
        trunc_normal_(self.cls_token, std=0.02)
        self.apply(init_module)
        nn.init.zeros_(self.time_embed)
        for block in self.blocks:
            nn.init.zeros_(block.temporal_fc.weight)
            nn.init.zeros_(block.temporal_fc.bias)

    def reset_head(self, num_classes: int) -> None:
        """Replace the head by a freshly initialised one with ``num_classes`` outputs."""
        self.num_classes = num_classes
        self.head = nn.Linear(self.embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        if num_classes > 0:
            init_module(self.head)

    def _pos_embed(self, grid: tuple[int, int]) -> Tensor:
        return resample_pos_embed(self.pos_embed, grid, self.grid, self.embed_interpolation)

    def _time_embed(self, num_frames: int) -> Tensor:
        mode = "nearest" if self.embed_interpolation == "nearest" else "linear"
        return resample_time_embed(self.time_embed, num_frames, mode)

    def embed(self, video: Tensor) -> Tensor:
        """(B, C, T, H, W) -> tokens (B, 1 + n*T, D) with position and time embeddings."""
        b, _, t = video.shape[:3]
        x, grid = self.patch_embed(rearrange(video, "b c t h w -> (b t) c h w"))
        pos = self._pos_embed(grid)
        # The official model adds pos_embed to a per-frame cls token and keeps one of them:
        # every copy equals cls_token + pos_embed[0].
        cls = (self.cls_token + pos[:, :1]).expand(b, -1, -1)
        x = rearrange(x + pos[:, 1:], "(b t) n d -> (b n) t d", b=b)
        x = self.pos_drop(x + self._time_embed(t))
        x = rearrange(x, "(b n) t d -> b (n t) d", b=b)
        return torch.cat([cls, x], dim=1)

    def forward_features(self, video: Tensor) -> Tensor:
        """Pre-head embedding: the final-norm cls token, (B, D)."""
        t = video.shape[2]
        x = self.embed(video)
        for i, block in enumerate(self.blocks):
            recompute = self.grad_checkpointing and i % self.grad_checkpointing_every == 0 and torch.is_grad_enabled()
            if recompute and self.grad_checkpointing_part == "block":
                x = checkpoint(block, x, t, use_reentrant=False)
            else:
                x = block(x, t, recompute_attention=recompute)
        return self.norm(x)[:, 0]

    def forward_intermediates(self, video: Tensor, indices: list[int]) -> list[Tensor]:
        """The tokens (B, 1 + n*T, D) leaving each block in ``indices`` (0-based, ascending),
        cls first, before any norm; blocks after the last index are not run."""
        t = video.shape[2]
        x, wanted, out = self.embed(video), set(indices), []
        for i, block in enumerate(self.blocks[: max(indices) + 1]):
            x = block(x, t)
            if i in wanted:
                out.append(x)
        return out

    def forward_head(self, features: Tensor) -> Tensor:
        return self.head(self.head_drop(features))

    def forward(self, video: Tensor) -> Tensor:
        """(B, C, T, H, W) -> logits (B, num_classes)."""
        return self.forward_head(self.forward_features(video))

    def attention_modules(self) -> dict[str, Attention]:
        """Every attention module by its parameter-name prefix, e.g. ``blocks.3.temporal_attn``."""
        return {name: m for name, m in self.named_modules() if isinstance(m, Attention)}


@dataclass
class TimeSformerSpec:
    """A TimeSformer described by a preset and what differs from it (the part of a model's
    configuration that is the network; the data fixes the classes, frames and resolution).

    Args:
        arch: architecture preset (:data:`PRESETS`): ``tiny`` (CPU tests), ``small`` (ViT-S/16),
            ``base`` (ViT-B/16, the paper's TimeSformer-B).
        attention: attention kind of both paths (a registered kind: ``dna``, ``softmax``, the
            paper's comparison variants; ``docs/variants.md``).
        temporal_attention: attention kind of the temporal path only (null: ``attention``).
        spatial_attention: attention kind of the spatial path only (null: ``attention``).
        attention_kwargs: arguments of the attention kinds in use, each kind taking its own
            (e.g. ``{alpha_init: 0.5}``); one no kind takes is an error.
        embed_dim: token width (null: the preset's).
        depth: number of blocks (null: the preset's).
        num_heads: attention heads (null: the preset's).
        patch_size: square patch side (null: the preset's).
        mlp_ratio: MLP hidden width / width (null: 4).
        qkv_bias: bias on the attention projections (null: true).
        in_chans: input channels (null: 3).
        drop_rate: dropout inside the MLP and after attention projections (null: 0).
        attn_drop_rate: dropout on attention weights (null: 0; keep 0 for the fused kernels).
        drop_path_rate: stochastic depth at the last block, linear over depth.
        head_dropout: dropout before the classification head (0.5 in the fine-tuning recipe).
        embed_interpolation: how pos/time embeddings follow another input geometry (null: nearest).
        norm_eps: LayerNorm epsilon (null: 1e-6).
        grad_checkpointing: activation checkpointing in training: keep less for backward and
            recompute it there, for less memory and more time (at 32 frames, TimeSformer-B:
            ``benchmarks/README.md``, "Long clips and memory"). Which blocks and which part:
            the next two options.
        grad_checkpointing_every: with ``grad_checkpointing``, recompute every k-th block only
            (blocks 0, k, 2k, ...; 1: every block): between the two in memory and time.
        grad_checkpointing_part: with ``grad_checkpointing``, what is recomputed: ``block``
            (the whole block; only its input is kept) or ``attention`` (the two attention
            sublayers and their norms; the MLP keeps its activations: less time, less saving).
        compile: ``torch.compile`` the network in place (parameter names unchanged).

    Every :class:`TimeSformer` argument but those the data fixes (:meth:`build`'s) is a field
    here, of the same type and default, or ``None`` for "the preset's" or "TimeSformer's"
    (documented "null: ..." above); ``tests/test_timesformer_spec.py`` holds them to it.
    """

    #: TimeSformer arguments the spec names as the task's options do.
    RENAMED: ClassVar[dict[str, str]] = {"head_drop_rate": "head_dropout"}
    #: Fields that are not TimeSformer arguments.
    OWN: ClassVar[tuple[str, ...]] = ("arch", "compile")

    arch: str = "base"
    attention: str = DEFAULT_ATTENTION
    temporal_attention: str | None = None
    spatial_attention: str | None = None
    attention_kwargs: dict[str, Any] | None = None
    embed_dim: int | None = None
    depth: int | None = None
    num_heads: int | None = None
    patch_size: int | None = None
    mlp_ratio: float | None = None
    qkv_bias: bool | None = None
    in_chans: int | None = None
    drop_rate: float | None = None
    attn_drop_rate: float | None = None
    drop_path_rate: float = 0.1
    head_dropout: float = 0.5
    embed_interpolation: str | None = None
    norm_eps: float | None = None
    grad_checkpointing: bool = False
    grad_checkpointing_every: int = 1
    grad_checkpointing_part: CheckpointPart = "block"
    compile: bool = False

    @classmethod
    def of(cls, value: "TimeSformerSpec | dict[str, Any] | None") -> "TimeSformerSpec":
        """A spec from itself, a dict of its fields (hyper-parameters as saved) or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        unknown = sorted(set(value) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"network: unknown option(s) {unknown}; the options are {[f.name for f in fields(cls)]}")
        return cls(**value)

    def kwargs(self, **data: Any) -> dict[str, Any]:
        """:class:`TimeSformer` arguments: the preset, this spec's choices, then ``data``
        (``num_classes``, ``num_frames``, ``img_size``)."""
        if self.arch not in PRESETS:
            raise ValueError(f"unknown arch {self.arch!r}; choose one of {sorted(PRESETS)}")
        argument = {field: name for name, field in self.RENAMED.items()}
        own = {argument.get(k, k): v for k, v in asdict(self).items() if v is not None and k not in self.OWN}
        return {**PRESETS[self.arch], **own, **data}

    def softmax_twin(self) -> "TimeSformerSpec":
        """The same architecture with softmax attention in both paths (the pair's baseline)."""
        return replace(self, attention="softmax", temporal_attention=None, spatial_attention=None,
                       attention_kwargs=None, compile=False)

    def build(self, num_classes: int, num_frames: int, img_size: int, pair_seed: int | None = None) -> "TimeSformer":
        """The network; with ``pair_seed``, initialised paired with its :meth:`softmax_twin`
        (:func:`~dna_video.models.pairing.build_paired`: the tensors both have are the twin's,
        the kind's extras come from their own stream, nothing depends on the global RNG)."""
        for name in ("attention", "temporal_attention", "spatial_attention"):
            kind = getattr(self, name)
            if kind is not None and kind not in attention_kinds():
                # The key as a config states it (the network is the task's model.network).
                raise ValueError(f"model.network.{name}: unknown attention {kind!r}; choose one of "
                                 f"{sorted(attention_kinds())}, or a kind your own module registers, imported "
                                 "with --import MODULE (docs/variants.md, \"Your own attention kind\")")
        data = dict(num_classes=num_classes, num_frames=num_frames, img_size=img_size)
        if pair_seed is None:
            net = TimeSformer(**self.kwargs(**data))
        else:
            twin = self.softmax_twin()
            net = build_paired(lambda: TimeSformer(**self.kwargs(**data)), lambda: TimeSformer(**twin.kwargs(**data)),
                               pair_seed)
        if self.compile:
            # In place (nn.Module.compile): parameter names and checkpoints stay unchanged.
            net.compile()
        return net


def timesformer(arch: str = "base", **kwargs: Any) -> TimeSformer:
    """Build a TimeSformer from a preset name in :data:`PRESETS`, overriding any argument."""
    try:
        preset = PRESETS[arch]
    except KeyError:
        raise ValueError(f"unknown arch {arch!r}; choose one of {sorted(PRESETS)}") from None
    return TimeSformer(**{**preset, **kwargs})
