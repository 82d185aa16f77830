"""Section: every registered attention kind against softmax attention in the same TimeSformer.

* Parameters of the full TimeSformer-B (12 blocks, D 768, 12 heads, 8 x 224 x 224, 31
  classes), counted.
* Forward (no grad, eval) and train step (forward, cross-entropy, backward, SGD step) at
  TimeSformer-B width with 2 blocks (:data:`benchmarks.model.REDUCED`): every block is
  exactly a TimeSformer-B block. Cog runs with ``cog_softmax_ends: false`` here (with 2 blocks
  both would be "ends" and keep softmax); in the 12-block model 10 blocks use cog weights.
* Differential Attention at the attention level: ours (V split into halves of the query's
  width, four fused-kernel calls) against timm's ``DiffAttention`` (one call per map with the
  2d-wide V), forward + backward over the spatial sequences of one clip.
"""

from __future__ import annotations

from typing import Callable

import torch

from dna_video.models.attention import attention_kind, attention_kinds, build_attention

from .harness import Row, interleaved, time_row
from .model import BASE, NUM_CLASSES, REDUCED, Geometry, _inputs, inference, train_step

__all__ = ["kinds", "run", "variant_rows"]



def kinds() -> tuple[str, ...]:
    """Every registered attention kind, softmax first (the baseline)."""
    return attention_kinds()


def build(g: Geometry, attention: str):
    from dna_video.models.timesformer import TimeSformer

    # Every block uses the kind, even in a 2-block model (cog keeps softmax at the ends otherwise).
    kwargs = dict(attention_kind(attention).all_blocks_kwargs) or None
    return TimeSformer(
        num_classes=NUM_CLASSES, img_size=g.img_size, num_frames=g.num_frames, patch_size=g.patch_size,
        embed_dim=g.embed_dim, depth=g.depth, num_heads=g.num_heads, attention=attention,
        attention_kwargs=kwargs, drop_path_rate=0.0,
    )


def parameter_count(attention: str, g: Geometry = BASE) -> int:
    return sum(p.numel() for p in build(g, attention).parameters())


def _diff_cases(g: Geometry) -> dict[str, Callable[[], None]]:
    from timm.layers.diff_attention import DiffAttention

    torch.manual_seed(0)
    length = (g.img_size // g.patch_size) ** 2 + 1
    x = torch.randn(g.batch * g.num_frames, length, g.embed_dim, requires_grad=True)
    ours = build_attention("diff", g.embed_dim, g.num_heads, layer_index=3)
    theirs = DiffAttention(g.embed_dim, num_heads=g.num_heads // 2, qkv_bias=False, depth=2)
    theirs.load_state_dict(ours.state_dict())

    def step(module) -> Callable[[], None]:
        def run() -> None:
            module(x).sum().backward()
            module.zero_grad(set_to_none=True)
            x.grad = None

        return run

    return {"ours": step(ours), "timm": step(theirs)}


def variant_rows(names: tuple[str, ...], g: Geometry, base: Geometry, rounds: int) -> list[Row]:
    """Parameter counts at ``base`` and forward / train-step times at ``g`` of the kinds
    ``names`` (softmax first: the baseline of every row)."""
    sec = "variants"
    rows: list[Row] = []
    params = {kind: parameter_count(kind, base) / 1e6 for kind in names}
    case = f"parameters (M), TimeSformer-B: {base.describe()}"
    rows += [Row(sec, case, "M params", kind, params[kind], "softmax", params["softmax"]) for kind in names[1:]]
    torch.manual_seed(0)
    video, target = _inputs(g, hf=False)
    models = {kind: build(g, kind) for kind in names}
    t = interleaved({kind: inference(m, video) for kind, m in models.items()}, rounds=rounds)
    case = f"forward, {g.describe()}"
    rows += [time_row(sec, case, "ms", kind, t[kind], "softmax", t["softmax"]) for kind in names[1:]]
    t = interleaved({kind: train_step(m, video, target) for kind, m in models.items()}, rounds=rounds)
    case = f"train step, {g.describe()}"
    rows += [time_row(sec, case, "ms", kind, t[kind], "softmax", t["softmax"]) for kind in names[1:]]
    return rows


def run(rounds: int = 5, quick: bool = False) -> list[Row]:
    g = REDUCED
    rounds = max(2, rounds // 2) if quick else rounds
    rows = variant_rows(kinds(), g, BASE, rounds)
    t = interleaved(_diff_cases(g), rounds=rounds)
    case = f"diff attention fwd+bwd, spatial: {g.num_frames} x {(g.img_size // g.patch_size) ** 2 + 1} tokens, D {g.embed_dim}"
    rows.append(time_row("variants", case, "ms", "ours (V halves)", t["ours"], "timm DiffAttention", t["timm"]))
    return rows
