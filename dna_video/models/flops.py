"""Cost of one view, counted by torch (``torch.utils.flop_counter``), not estimated by hand.

torch counts a multiply-add as 2 floating-point operations (FLOPs). Video papers (TimeSformer,
the DnA paper) report fvcore's count, which is one per multiply-add: their "GFLOPs" are the
GMACs here (FLOPs / 2). Only matrix products, convolutions and attention are counted (norms,
softmax and additions are a few percent and left out by both conventions).

On the CPU, torch's fused attention kernel is not registered with the counter (it would count
0), so counting runs attention through its explicit (math) form, which the counter knows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["ViewCost", "count_flops", "view_cost"]


@dataclass(frozen=True)
class ViewCost:
    """What one forward pass over one view costs."""

    flops: int  # torch's count: 2 per multiply-add
    parameters: int

    @property
    def gmacs(self) -> float:
        """Giga multiply-adds: the papers' "GFLOPs" (fvcore's convention)."""
        return self.flops / 2e9

    @property
    def gflops(self) -> float:
        return self.flops / 1e9


def count_flops(model: nn.Module, *inputs: torch.Tensor) -> int:
    """FLOPs (2 per multiply-add) of ``model(*inputs)`` in eval mode, without gradients."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(*inputs)
    finally:
        model.train(was_training)
    return int(counter.get_total_flops())


def view_cost(model: nn.Module, num_frames: int, img_size: int, in_chans: int = 3) -> ViewCost:
    """Cost of one (1, C, T, H, W) view of a video model such as the TimeSformer. A model on
    the ``meta`` device is counted without running any arithmetic."""
    device = next(model.parameters()).device
    view = torch.zeros(1, in_chans, num_frames, img_size, img_size, device=device)
    return ViewCost(count_flops(model, view), sum(p.numel() for p in model.parameters()))
