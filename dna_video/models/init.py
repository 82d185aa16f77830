"""Weight initialisation shared by the networks (the official TimeSformer's)."""

from __future__ import annotations

from timm.layers import trunc_normal_
from torch import nn

__all__ = ["init_module"]


def init_module(m: nn.Module) -> None:
    """Trunc-normal(0.02) Linear weights with zero biases; LayerNorm weight 1, bias 0."""
    if isinstance(m, nn.Linear):
        trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
