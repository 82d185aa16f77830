"""A TimeSformer whose blocks hold every registered attention kind, for the tests whose cost is
per model rather than per kind (export, ``torch.compile``): tracing or exporting one such model
checks every kind at once, and a kind registered later is in it without a new test."""

from __future__ import annotations

import math
from typing import Any, Literal

from dna_video.models.attention import attention_kind, attention_kinds
from dna_video.models.timesformer import DividedSpaceTimeBlock, TimeSformer


#: How :func:`kind_slots` lays the kinds out over the blocks.
Layout = Literal["pairs", "swapped_pairs", "cyclic"]


def kind_slots(layout: Layout = "pairs") -> list[tuple[str, str]]:
    """The (spatial, temporal) kind of each block. ``pairs``: the registered kinds two per block
    in their order (ceil(kinds / 2) blocks; the first kind again in an odd one out), the first
    of each pair spatial; ``swapped_pairs``: the same with the paths swapped (the two together
    put every kind in both paths); ``cyclic``: one block per kind, block i spatial ``kinds[i]``
    and temporal ``kinds[i + 1]`` (every kind in both paths of one model)."""
    kinds = attention_kinds()
    if layout == "cyclic":
        return [(kinds[i], kinds[(i + 1) % len(kinds)]) for i in range(len(kinds))]
    slots = [kinds[j % len(kinds)] for j in range(2 * math.ceil(len(kinds) / 2))]
    pairs = list(zip(slots[0::2], slots[1::2]))
    if layout == "swapped_pairs":
        return [(temporal, spatial) for spatial, temporal in pairs]
    assert layout == "pairs", layout
    return pairs


def every_kind_timesformer(layout: Layout = "pairs", **geometry: Any) -> TimeSformer:
    """A TimeSformer of ``geometry`` (TimeSformer's arguments but depth and the attention kinds)
    with the blocks of :func:`kind_slots`, each built as TimeSformer builds its blocks (each
    kind's ``all_blocks_kwargs``, its layer index, the model's initialisation). ``attention``
    names the blocks' kinds. Not randomised: ``temporal_fc`` starts at zero as in any model."""
    slots = kind_slots(layout)
    geometry = {"drop_path_rate": 0.0, **geometry}
    # The blocks below are built with TimeSformer's defaults for these.
    assert not {"mlp_ratio", "qkv_bias", "drop_rate", "attn_drop_rate", "norm_eps"} & set(geometry), geometry
    assert geometry["drop_path_rate"] == 0.0, "the replaced blocks have no drop path"
    net = TimeSformer(**geometry, depth=len(slots), attention="softmax")
    for i, (spatial, temporal) in enumerate(slots):
        kwargs = {**attention_kind(spatial).all_blocks_kwargs, **attention_kind(temporal).all_blocks_kwargs}
        net.blocks[i] = DividedSpaceTimeBlock(net.embed_dim, net.blocks[i].attn.num_heads, spatial, kwargs,
                                              temporal_attention=temporal, layer_index=i + 1, num_layers=len(slots))
    net.init_weights()
    net.spatial_attention = ",".join(spatial for spatial, _ in slots)
    net.temporal_attention = ",".join(temporal for _, temporal in slots)
    net.attention = f"every kind (temporal={net.temporal_attention}; spatial={net.spatial_attention})"
    return net
