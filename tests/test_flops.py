"""Cost per view: torch's FLOP counter against a count by hand of every matrix product."""

from __future__ import annotations

import pytest

from dna_video.models.flops import view_cost
from dna_video.models.timesformer import TimeSformer


def hand_count(attention: str, D=16, depth=2, T=4, img=16, patch=8, classes=5, mlp_ratio=4) -> int:
    """FLOPs (2 per multiply-add) of one view of a divided space-time TimeSformer."""
    N = (img // patch) ** 2          # patches per frame
    branches = 2 if attention == "dna" else 1
    projections = 5 if attention == "dna" else 3  # Q+, K, V+ (and Q-, V-)
    flops = 2 * T * N * (3 * patch * patch) * D  # patch embedding
    for _ in range(depth):
        # temporal attention: the T*N patch tokens, one sequence of T per location
        tokens = T * N
        flops += 2 * tokens * D * projections * D
        flops += branches * 2 * (2 * N * T * T * D)  # scores and weighted values, all heads
        flops += 2 * tokens * D * D                # proj
        flops += 2 * tokens * D * D                # temporal_fc
        # spatial attention: one sequence of 1 + N (cls repeated) per frame
        tokens = T * (1 + N)
        flops += 2 * tokens * D * projections * D
        flops += branches * 2 * (2 * T * (1 + N) ** 2 * D)
        flops += 2 * tokens * D * D
        # MLP on cls + patches
        flops += 2 * 2 * (1 + T * N) * D * (mlp_ratio * D)
    return flops + 2 * D * classes               # head


@pytest.mark.parametrize("attention", ["softmax", "dna"])
def test_flop_count_equals_the_hand_count(attention):
    model = TimeSformer(num_classes=5, img_size=16, patch_size=8, num_frames=4, embed_dim=16, depth=2,
                        num_heads=2, attention=attention)
    cost = view_cost(model, num_frames=4, img_size=16)
    assert cost.flops == hand_count(attention)
    assert cost.gmacs == cost.flops / 2e9
    assert cost.parameters == sum(p.numel() for p in model.parameters())


def test_timesformer_base_view_cost_is_the_papers_figure():
    """TimeSformer-B, 8 x 224 x 224: 196 GFLOPs per view in the TimeSformer paper (fvcore's
    multiply-adds). Two of its twelve blocks are counted (on the meta device: no arithmetic
    runs) and checked against the hand count, which then gives the twelve-block figure."""
    geometry = dict(D=768, T=8, img=224, patch=16, classes=400)
    for attention in ("softmax", "dna"):
        model = TimeSformer(num_classes=400, img_size=224, patch_size=16, num_frames=8, embed_dim=768, depth=2,
                            num_heads=12, attention=attention).to("meta")
        assert view_cost(model, 8, 224).flops == hand_count(attention, depth=2, **geometry)
    softmax, dna = (hand_count(a, depth=12, **geometry) for a in ("softmax", "dna"))
    assert 195e9 < softmax / 2 < 197e9
    assert 1.2 < dna / softmax < 1.3
