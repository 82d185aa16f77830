"""Attention maps of a TimeSformer: where the cls token looks in each frame, per branch.

:func:`capture_maps` runs the network with the chosen attention modules on their written-out
path (:meth:`~dna_video.models.attention.Attention.forward_with_maps`), which returns the same
output as the fused path plus the maps; it keeps those maps. From them:

* :func:`cls_maps`: the spatial attention of the cls token to the patches of each frame,
  (T, h, w) per branch (DnA: ``positive`` and ``negative``; softmax: ``softmax``; a kind
  whose registry entry lists signed maps: e.g. ``cog (signed)``, see :func:`branch_name`);
* :func:`temporal_maps`: the temporal attention between frames, (T, T) per branch, averaged
  over the patch locations;
* :func:`rollout`: attention rollout (Abnar & Zuidema 2020) of the cls token through every
  divided space-time block, for softmax attention or DnA's positive branch only: rollout
  multiplies row-stochastic maps, and the output of a DnA head is a SIGNED sum of two of them
  (weights alpha_h, unconstrained), which no single row-stochastic map describes. Signed maps
  (cog's sign(p) softmax(|p|)) are refused with a ValueError naming the kind.

Token order (what other tools get wrong): the network's patch tokens are ordered space-major,
time-minor, ``(n t)``, n = h * w patches in row-major order; the spatial attention sees one
frame's ``[cls, patch 0 .. n-1]`` with batch ``(b t)``; the temporal attention sees one
location's T frames with batch ``(b n)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from einops import rearrange, reduce
from torch import Tensor

from dna_video.models.attention import Attention, AttentionKind, kind_of
from dna_video.models.timesformer import TimeSformer

__all__ = [
    "BRANCH_NAMES", "branch_name", "signed_names", "capture_maps", "cls_maps", "temporal_maps", "rollout",
    "attention_module_names",
]

#: Display names of the maps each attention kind returns (for a signed map: :func:`branch_name`).
BRANCH_NAMES = {"positive": "positive", "negative": "negative", "attn": "softmax"}


def branch_name(branch: str, kind: AttentionKind | None = None) -> str:
    """Display name of the map ``branch`` of an attention of ``kind``: a map the kind's
    registry entry lists as signed is named for the kind (its one map, ``attn``) or the branch,
    with ``(signed)``: ``cog (signed)``, never ``softmax``."""
    if kind is not None and branch in kind.signed_maps:
        return f"{kind.name if branch == 'attn' else branch} (signed)"
    return BRANCH_NAMES.get(branch, branch)


def signed_names(*kinds: AttentionKind | None) -> set[str]:
    """Display names of the signed maps of ``kinds`` (what figures draw centred at 0)."""
    return {branch_name(branch, kind) for kind in kinds if kind is not None for branch in kind.signed_maps}


def attention_module_names(net: TimeSformer, layers: Iterable[int], kinds: Iterable[str] = ("spatial", "temporal")) -> list[str]:
    """Names of the attention modules of ``layers`` (negative: from the end) and ``kinds``."""
    depth = len(net.blocks)
    names = []
    for layer in layers:
        if not -depth <= layer < depth:
            raise ValueError(f"layer {layer} outside the model's {depth} blocks (0..{depth - 1}, or negative from the end)")
        index = layer % depth
        for kind in kinds:
            names.append(f"blocks.{index}.{'attn' if kind == 'spatial' else 'temporal_attn'}")
    return names


def _maps_of(module: Attention, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    return module.forward_with_maps(x)


@contextmanager
def written_out(modules: dict[str, Attention], store: dict[str, dict[str, Tensor]],
                write: Callable[[Attention, Tensor], tuple[Tensor, dict[str, Tensor]]] = _maps_of) -> Iterator[None]:
    """While active, each of ``modules`` runs ``write(module, x)`` instead of its forward (by
    default :meth:`forward_with_maps`: the formula written out) and keeps the tensors it
    returns beside the output in ``store`` by module name."""

    def make(name: str, module: Attention):
        def forward(x: Tensor) -> Tensor:
            out, found = write(module, x)
            store[name] = {key: value.detach() for key, value in found.items()}
            return out

        return forward

    for name, module in modules.items():
        module.forward = make(name, module)  # an instance attribute shadows the class's forward
    try:
        yield
    finally:
        for module in modules.values():
            del module.forward


@torch.no_grad()
def capture_maps(net: TimeSformer, video: Tensor, module_names: Iterable[str] | None = None) -> tuple[Tensor, dict[str, dict[str, Tensor]]]:
    """Logits of ``video`` (B, C, T, H, W) and the attention maps of ``module_names`` (default:
    every attention module): name -> branch -> (batch, heads, L, L), rows summing to 1.

    Spatial modules' batch is ``(b t)`` and L = 1 + h*w (cls first); temporal modules' batch
    is ``(b n)`` and L = T."""
    available = net.attention_modules()
    names = list(available) if module_names is None else list(module_names)
    missing = [n for n in names if n not in available]
    if missing:
        raise ValueError(f"no attention module {missing[0]!r}; the model has {sorted(available)[:4]}...")
    store: dict[str, dict[str, Tensor]] = {}
    with written_out({n: available[n] for n in names}, store):
        logits = net(video)
    return logits, store


def grid_of(net: TimeSformer, video: Tensor) -> tuple[int, int]:
    """The patch grid (h, w) of ``video`` (B, C, T, H, W)."""
    return video.shape[-2] // net.patch_size, video.shape[-1] // net.patch_size


def cls_maps(maps: dict[str, Tensor], num_frames: int, grid: tuple[int, int], head: int | None = None,
             kind: AttentionKind | None = None) -> dict[str, Tensor]:
    """Spatial attention of the cls token to each frame's patches: branch -> (B, T, h, w),
    from one spatial module's maps (``(b t) heads L L``); mean over heads unless ``head``.
    ``kind``: the module's attention kind, which names its signed maps (:func:`branch_name`)."""
    out = {}
    for branch, attn in maps.items():
        row = attn[:, :, 0, 1:] if head is None else attn[:, head: head + 1, 0, 1:]
        out[branch_name(branch, kind)] = rearrange(
            reduce(row, "bt heads n -> bt n", "mean"), "(b t) (h w) -> b t h w", t=num_frames, h=grid[0], w=grid[1]
        )
    return out


def temporal_maps(maps: dict[str, Tensor], batch: int, head: int | None = None,
                  kind: AttentionKind | None = None) -> dict[str, Tensor]:
    """Attention between frames: branch -> (B, T, T) (row: query frame), the mean over patch
    locations (and over heads unless ``head``), from one temporal module's maps
    (``(b n) heads T T``); ``kind`` as for :func:`cls_maps`."""
    out = {}
    for branch, attn in maps.items():
        attn = attn if head is None else attn[:, head: head + 1]
        out[branch_name(branch, kind)] = reduce(attn, "(b n) heads t u -> b t u", "mean", b=batch)
    return out


def _branch(maps: dict[str, Tensor], kind: AttentionKind | None, where: str) -> Tensor:
    """The map rollout takes from one module's maps: softmax's one map or the positive branch;
    a signed map (by the kind's registry entry, or by its values) is refused."""
    name = "attn" if "attn" in maps else "positive" if "positive" in maps else None
    if name is None:
        raise ValueError(f"no softmax or positive-branch map among {sorted(maps)}")
    if kind is not None and name in kind.signed_maps:
        raise ValueError(f"rollout: {where} is of attention kind {kind.name!r}, whose weights are signed (not "
                         f"probabilities); rollout multiplies row-stochastic maps: softmax attention or DnA's "
                         f"positive branch only")
    if bool((maps[name] < 0).any()):
        raise ValueError(f"rollout: the map of {where} has negative weights; rollout multiplies row-stochastic "
                         f"maps: softmax attention or DnA's positive branch only")
    return maps[name]


@torch.no_grad()
def rollout(net: TimeSformer, maps: dict[str, dict[str, Tensor]], num_frames: int, grid: tuple[int, int]) -> Tensor:
    """Attention rollout of the cls token over the patches of each frame, (T, h, w), for ONE
    video, through every block (maps of every module from :func:`capture_maps`).

    Per block the token mixing is written as one matrix over the 1 + n*T tokens ``[cls, (n t)]``
    with the residual, 0.5 (I + A), for the temporal attention (block diagonal over locations;
    the cls token is not in it) and then the spatial attention (each patch reads its own frame
    and the cls copy; the cls row is the mean over frames of its copies' rows, as the network
    averages their outputs); head maps averaged; the blocks multiplied in order. A ValueError
    if any block's map is signed (an attention kind with signed maps, e.g. cog)."""
    t = num_frames
    n = grid[0] * grid[1]
    size = 1 + n * t
    eye = torch.eye(size, dtype=torch.float64)
    joint = eye.clone()
    for index, block in enumerate(net.blocks):
        picked = {}
        for part in ("temporal_attn", "attn"):
            where = f"blocks.{index}.{part}"
            picked[part] = _branch(maps[where], kind_of(getattr(block, part, None)), where).double()
        temporal = reduce(picked["temporal_attn"], "n heads t u -> n t u", "mean")
        spatial = reduce(picked["attn"], "t heads l m -> t l m", "mean")
        if temporal.shape[0] != n or spatial.shape[0] != t:
            raise ValueError("rollout takes the maps of one video")
        mix_t = eye.clone()
        mix_t[1:, 1:] = torch.block_diag(*temporal)
        mix_s = torch.zeros(size, size, dtype=torch.float64)
        # Patch (p, t) reads patch (q, t) of its own frame: (n t) x (n t) with a delta in time.
        mix_s[1:, 1:] = rearrange(
            torch.einsum("tpq,tu->ptqu", spatial[:, 1:, 1:], torch.eye(t, dtype=torch.float64)), "p t q u -> (p t) (q u)"
        )
        mix_s[1:, 0] = rearrange(spatial[:, 1:, 0], "t p -> (p t)")
        mix_s[0, 0] = spatial[:, 0, 0].mean()
        mix_s[0, 1:] = rearrange(spatial[:, 0, 1:], "t q -> (q t)") / t
        layer = (0.5 * (eye + mix_s)) @ (0.5 * (eye + mix_t))
        joint = layer @ joint
    return rearrange(joint[0, 1:].float(), "(h w t) -> t h w", h=grid[0], w=grid[1], t=t)
