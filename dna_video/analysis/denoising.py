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
  that declares one (DnA's alpha, Differential Attention's lambda) is 0, for the causal test.

Attention mass ignores alpha and the value norms: a branch can look at the distractors and
still contribute little. That is why the experiment also switches branches off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager

import torch
import torch.nn.functional as F
from einops import rearrange, reduce
from torch import Tensor, nn

from dna_video.models.attention import kind_of
from dna_video.analysis.maps import BRANCH_NAMES, capture_maps

__all__ = ["REGIONS", "patch_shares", "region_mass", "evaluate_masked", "negative_branch_off", "has_negative_branch"]

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
