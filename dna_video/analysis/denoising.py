"""Where attention goes and what the negative branch does, scored against ground-truth masks
(the measures of the denoising experiment; data from
:class:`~dna_video.data.distractors.SyntheticDistractors` with ``with_masks``).

* :func:`patch_shares`: masks (pixels) -> the share of each patch covered by the actor and by
  each distractor, on the patch grid the network saw;
* :func:`region_mass`: the share of a cls-to-patch attention map's mass on the actor, on the
  distractors and on the background;
* :func:`evaluate_masked`: one pass over a test loader: per-video probabilities and, per
  attention branch and block, the mean region shares of the cls token's spatial attention;
* :func:`negative_branch_off`: a context in which the negative branch of every attention kind
  that declares one (DnA's alpha, Differential Attention's lambda) is 0, for the causal test;
* :func:`measure_mechanism`: what the negative branch does, per spatial block and head: region
  mass relative to area for each map, the correlation of the two maps, cos(q+, -q-) of the cls
  query and the norm of the negative branch's output relative to the positive one's;
  :func:`mechanism_rows` flattens it into table rows.

Attention mass ignores alpha and the value norms: a branch can look at the distractors and
still contribute little. That is why the experiment also switches branches off, and why
:func:`measure_mechanism` measures the branch's output.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from itertools import product
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange, reduce, repeat
from torch import Tensor, nn

from dna_video.models.attention import kind_of
from dna_video.analysis.maps import BRANCH_NAMES, capture_maps, written_out

__all__ = [
    "REGIONS", "patch_shares", "region_mass", "evaluate_masked", "negative_branch_off", "has_negative_branch",
    "measure_mechanism", "mechanism_rows", "MECHANISM_MEASURES",
]

REGIONS = ("actor", "distractors", "background")


def patch_shares(masks: Tensor, patch_size: int) -> Tensor:
    """Masks (..., M, T, H, W) of disjoint regions (actor first) -> the share of each patch
    covered by each region, (..., M, T, H / p, W / p), in [0, 1]."""
    *lead, m, t, h, w = masks.shape
    if h % patch_size or w % patch_size:
        raise ValueError(f"mask size {h}x{w} is not a multiple of the patch size {patch_size}")
    flat = masks.reshape(-1, 1, h, w).float()
    pooled = F.avg_pool2d(flat, patch_size)
    return pooled.reshape(*lead, m, t, h // patch_size, w // patch_size)


def region_mass(cls_map: Tensor, shares: Tensor) -> Tensor:
    """The share of the attention mass of ``cls_map`` (B, T, h, w; non-negative, e.g. the cls
    row over a frame's patches) on the actor, the distractors and the background: (B, 3),
    rows summing to 1: the map's weight on a region summed over the frames, over its weight on
    all patches of all frames. ``shares``: (B, M, T, h, w) from :func:`patch_shares`; a patch
    partly covered by a region gives it that part of its weight."""
    total = reduce(cls_map, "b t h w -> b", "sum").clamp_min(1e-12)
    actor = (cls_map * shares[:, 0]).sum(dim=(1, 2, 3)) / total
    distractors = (cls_map * shares[:, 1:].sum(dim=1)).sum(dim=(1, 2, 3)) / total
    return torch.stack([actor, distractors, 1.0 - actor - distractors], dim=1)


def has_negative_branch(net: nn.Module) -> bool:
    """Whether some attention of ``net`` has a branch :func:`negative_branch_off` can switch off."""
    return any(kind.negative is not None for kind in map(kind_of, net.modules()) if kind is not None)


@contextmanager
def negative_branch_off(net: nn.Module) -> Iterator[int]:
    """Inside: the negative branch of every attention module whose kind has one contributes
    nothing (its weight, e.g. DnA's alpha_h or Differential Attention's lambda, is 0);
    restored on exit. Yields how many modules were changed."""
    with ExitStack() as stack:
        switched = 0
        for module in net.modules():
            kind = kind_of(module)
            if kind is not None and kind.negative is not None:
                stack.enter_context(kind.negative.off(module))
                switched += 1
        yield switched


@torch.no_grad()
def evaluate_masked(net: nn.Module, batches: Iterable[dict], with_maps: bool = True) -> dict:
    """Probabilities per video and attention region shares from test ``batches`` (samples of
    a loader with masks: ``video`` (B, V, C, T, H, W), ``masks`` (B, V, M, T, H, W)).

    Returns ``probs`` (N, K) (softmax of the mean view logits), ``labels`` (N,), and with
    ``with_maps``: ``mass`` branch -> (blocks, 3) mean region shares of the cls token's
    spatial attention over the patches (actor, distractors, background; heads averaged;
    ``softmax`` for one-map attentions, with absolute weights for cog's signed map) and
    ``area``: (3,) the regions' mean share of the patches (what uniform attention gives)."""
    probs, labels = [], []
    mass_sum: dict[str, Tensor] = {}
    area_sum = torch.zeros(3, dtype=torch.float64)
    count = 0
    depth = len(net.blocks)
    spatial = [f"blocks.{i}.attn" for i in range(depth)]
    for batch in batches:
        if batch["video"] is None:
            continue
        video, masks = batch["video"], batch["masks"]
        b, v = video.shape[:2]
        views = rearrange(video, "b v c t h w -> (b v) c t h w")
        if with_maps:
            logits, maps = capture_maps(net, views, spatial)
        else:
            logits, maps = net(views), {}
        logits = reduce(logits, "(b v) k -> b k", "mean", b=b)
        probs.append(logits.softmax(dim=-1))
        labels.append(batch["label"])
        if with_maps:
            shares = patch_shares(rearrange(masks, "b v m t h w -> (b v) m t h w"), net.patch_size)
            t, gh, gw = shares.shape[-3:]
            mass_free = shares.new_ones(shares.shape[0], t, gh, gw)
            area_sum += region_mass(mass_free, shares).double().sum(0)
            for layer, name in enumerate(spatial):
                for branch, attn in maps[name].items():
                    if branch == "combined":
                        continue
                    row = attn[:, :, 0, 1:].abs()  # cls -> patches; cog's weights are signed
                    cls_map = rearrange(reduce(row, "bt heads n -> bt n", "mean"), "(bv t) (h w) -> bv t h w", t=t, h=gh, w=gw)
                    key = BRANCH_NAMES.get(branch, branch)
                    mass_sum.setdefault(key, torch.zeros(depth, 3, dtype=torch.float64))
                    mass_sum[key][layer] += region_mass(cls_map, shares).double().sum(0)
            count += b * v
    result = {"probs": torch.cat(probs), "labels": torch.cat(labels)}
    if with_maps and count:
        result["mass"] = {key: value / count for key, value in mass_sum.items()}
        result["area"] = area_sum / count
    return result


#: The per-block, per-head measures of :func:`measure_mechanism` besides the region masses.
MECHANISM_MEASURES = ("map_correlation", "query_cosine", "output_norm_ratio")


def _terms_or_maps(module: nn.Module, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """The module's per-head terms (:meth:`NegativeBranch.terms_of`), or its maps when its kind
    declares no terms method."""
    kind = kind_of(module)
    negative = kind.negative if kind is not None else None
    if negative is not None and negative.has_terms(module):
        return negative.terms_of(module, x)
    return module.forward_with_maps(x)


@torch.no_grad()
def measure_mechanism(net: nn.Module, batches: Iterable[dict]) -> dict[str, Any]:
    """What each spatial attention block and head does, from test ``batches`` with masks (as
    :func:`evaluate_masked`: ``video`` (B, V, C, T, H, W), ``masks`` (B, V, M, T, H, W)), on the
    cls token's row of every frame (its spatial attention over the frame's patches).

    Returns (``blocks`` = spatial attention modules, ``heads`` = its heads; diff: H/2):

    * ``probs`` (N, K), ``labels`` (N,), ``views``: how many views were measured;
    * ``area`` (3,): the regions' mean share of the patches (actor, distractors, background);
    * ``mass``: map -> (blocks, heads, 3), the mean share of the map's mass on each region
      (``softmax`` for one-map kinds, absolute weights for cog's signed map; DnA kinds and diff:
      ``positive`` and ``negative``);
    * ``mass_relative``: map -> (blocks, heads, 3), ``mass / area`` (1: as uniform attention;
      NaN for a region no measured view has, e.g. distractors at level ``none``);

    and for kinds with a negative branch:

    * ``map_correlation`` (blocks, heads): the Pearson correlation of the positive and the
      negative map (the cls row over the T x n patches of a view), mean over views;
      ``map_correlation_views`` counts the views where both maps vary (a constant map has no
      correlation and is left out);
    * ``query_cosine`` (blocks, heads): cos(q+, -q-) of the cls query (the query of the
      negative map taken as a softmax query: 1 when the negative map repeats the positive one;
      ``dna_tied_q``: -1; diff: cos(q1, q2), over keys of their own), mean over views and frames;
    * ``output_norm_ratio`` (blocks, heads): || alpha_h softmin(.) V- || / || softmax(.) V+ ||
      of the cls token (the branch outputs as they are summed, signed for dna_shared_v and
      diff), mean of the norms over views and frames, one over the other;
    * ``modules_without_terms``: modules whose kind has a negative branch but no per-head terms
      method (:class:`~dna_video.models.attention.NegativeBranch`): correlation only.
    """
    depth = len(net.blocks)
    names = [f"blocks.{i}.attn" for i in range(depth)]
    modules = {name: net.get_submodule(name) for name in names}
    kinds = {name: kind_of(module) for name, module in modules.items()}
    sums: dict[str, Tensor] = {}

    def add(key: str, layer: int, value: Tensor) -> None:
        sums.setdefault(key, torch.zeros(depth, *value.shape, dtype=torch.float64))[layer] += value

    probs, labels = [], []
    area_sum = torch.zeros(3, dtype=torch.float64)
    views_total = 0
    for batch in batches:
        if batch["video"] is None:
            continue
        video, masks = batch["video"], batch["masks"]
        b = video.shape[0]
        store: dict[str, dict[str, Tensor]] = {}
        with written_out(modules, store, _terms_or_maps):
            logits = net(rearrange(video, "b v c t h w -> (b v) c t h w"))
        probs.append(reduce(logits, "(b v) k -> b k", "mean", b=b).softmax(dim=-1))
        labels.append(batch["label"])
        shares = patch_shares(rearrange(masks, "b v m t h w -> (b v) m t h w"), net.patch_size).double()
        views, t, gh, gw = shares.shape[0], *shares.shape[-3:]
        area_sum += region_mass(shares.new_ones(views, t, gh, gw), shares).sum(0)
        views_total += views
        for layer, name in enumerate(names):
            found, kind = store[name], kinds[name]
            negative = kind.negative if kind is not None else None
            # The cls row over each frame's patches: (b v t) heads L L -> (b v) heads t n.
            rows = {branch: rearrange(found[branch][:, :, 0, 1:].double(), "(bv t) heads n -> bv heads t n", t=t)
                    for branch in (negative.maps if negative is not None else found)}
            for branch, row in rows.items():
                heads = row.shape[1]
                cls_map = rearrange(row.abs(), "bv heads t (h w) -> (bv heads) t h w", h=gh, w=gw)
                mass = region_mass(cls_map, repeat(shares, "bv m t h w -> (bv heads) m t h w", heads=heads))
                add(f"mass {BRANCH_NAMES.get(branch, branch)}", layer, reduce(mass, "(bv heads) r -> heads r", "sum",
                                                                             heads=heads))
            if negative is None:
                continue
            positive, negative_map = (rearrange(rows[m], "bv heads t n -> bv heads (t n)") for m in negative.maps)
            positive = positive - positive.mean(-1, keepdim=True)
            negative_map = negative_map - negative_map.mean(-1, keepdim=True)
            scale = positive.norm(dim=-1) * negative_map.norm(dim=-1)
            varies = scale > 0
            correlation = (positive * negative_map).sum(-1) / torch.where(varies, scale, 1.0)
            add("correlation", layer, torch.where(varies, correlation, 0.0).sum(0))
            add("correlation views", layer, varies.sum(0).double())
            if "query_positive" not in found:
                continue
            cls = {key: found[key][:, :, 0].double() for key in
                   ("query_positive", "query_negative", "out_positive", "out_negative")}  # (b v t) heads d
            add("cosine", layer, F.cosine_similarity(cls["query_positive"], cls["query_negative"], dim=-1).sum(0))
            add("norm positive", layer, cls["out_positive"].norm(dim=-1).sum(0))
            add("norm negative", layer, cls["out_negative"].norm(dim=-1).sum(0))
            add("cls tokens", layer, torch.full((cls["out_positive"].shape[1],), cls["out_positive"].shape[0],
                                                dtype=torch.float64))
    if not views_total:
        raise ValueError("measure_mechanism: no video in the batches (every video failed to load, or none given)")
    area = area_sum / views_total
    mass = {key.removeprefix("mass "): value / views_total for key, value in sums.items() if key.startswith("mass ")}
    result: dict[str, Any] = {
        "probs": torch.cat(probs), "labels": torch.cat(labels), "views": views_total, "area": area,
        "mass": mass, "mass_relative": {branch: value / area for branch, value in mass.items()},
        "modules_without_terms": [name for name in names if kinds[name] is not None and kinds[name].negative is not None
                                  and not kinds[name].negative.has_terms(modules[name])],
    }
    if "correlation" in sums:
        counted = sums["correlation views"]
        result["map_correlation"] = sums["correlation"] / counted  # NaN where no view varies
        result["map_correlation_views"] = counted.long()
    if "cosine" in sums:
        result["query_cosine"] = sums["cosine"] / sums["cls tokens"]
        result["output_norm_ratio"] = sums["norm negative"] / sums["norm positive"]
    return result


def mechanism_rows(mechanism: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`measure_mechanism`'s per-block, per-head values as table rows: ``block``,
    ``head``, ``measure`` (``mass``, ``mass_relative`` or one of :data:`MECHANISM_MEASURES`),
    ``map`` and ``region`` (empty for the measures of both maps), ``value`` (NaN: undefined)."""
    rows = []
    for measure in ("mass", "mass_relative"):
        for branch, values in mechanism[measure].items():
            for block, head, region in product(*map(range, values.shape)):
                rows.append({"block": block, "head": head, "measure": measure, "map": branch,
                             "region": REGIONS[region], "value": float(values[block, head, region])})
    for measure in MECHANISM_MEASURES:
        if measure in mechanism:
            values = mechanism[measure]
            for block, head in product(*map(range, values.shape)):
                rows.append({"block": block, "head": head, "measure": measure, "map": "", "region": "",
                             "value": float(values[block, head])})
    return rows

