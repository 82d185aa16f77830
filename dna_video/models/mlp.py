"""The transformer MLP, keeping half of its activations out of memory in training.

fc1 -> GELU -> fc2, as timm's ``Mlp`` (same parameter names ``fc1``, ``fc2``), except that the
GELU output is not kept for backward: fc2's weight gradient needs it, and plain autograd keeps
it next to fc1's output, two (tokens x 4D) tensors per block. Here only fc1's output is kept
and the GELU is recomputed from it in backward: one elementwise pass, no GEMM. That is 4D of
the ~24D floats per token a TimeSformer block keeps (-17% activation memory), for one more
elementwise pass in backward (its measured cost: ``benchmarks/README.md``, "Why the code is the
way it is").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Mlp", "gelu_linear"]


class _GeluLinear(torch.autograd.Function):
    """linear(gelu(h), weight, bias), saving h (not gelu(h)) for backward.

    Under autocast the forward's linear runs in the autocast dtype; backward does its GEMMs
    in that same dtype and returns the weight and bias gradients in theirs, as autocast's
    own casts would."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        out = F.linear(F.gelu(h), weight, bias)
        ctx.save_for_backward(h, weight)
        ctx.has_bias = bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        h, weight = ctx.saved_tensors
        need_h, need_weight, need_bias = ctx.needs_input_grad
        flat_grad = grad.reshape(-1, grad.shape[-1])
        grad_h = grad_weight = grad_bias = None
        if need_weight:  # (a frozen fc2 skips this GEMM)
            # The recomputed activation is freed before the input gradient is made, and
            # GELU's backward writes over its incoming gradient: one (tokens x 4D) temporary
            # at a time.
            act = F.gelu(h).to(grad.dtype)
            grad_weight = (flat_grad.t() @ act.reshape(-1, act.shape[-1])).to(weight.dtype)
            del act
        if need_bias and ctx.has_bias:
            grad_bias = flat_grad.sum(0).to(ctx.bias_dtype)
        if need_h:
            grad_h = (grad @ weight.to(grad.dtype)).to(h.dtype)
            torch.ops.aten.gelu_backward.grad_input(grad_h, h, grad_input=grad_h)
        return grad_h, grad_weight, grad_bias


def gelu_linear(h: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(F.gelu(h), weight, bias)`` that keeps only ``h`` for backward."""
    return _GeluLinear.apply(h, weight, bias)


class Mlp(nn.Module):
    """fc1 -> GELU -> dropout -> fc2 -> dropout, the GELU recomputed in backward.

    Args:
        in_features: token width D.
        hidden_features: hidden width (4D in ViT/TimeSformer).
        drop: dropout after the GELU and after fc2. With dropout active in training the plain
            path runs (the mask between GELU and fc2 would have to be kept anyway).
    """

    def __init__(self, in_features: int, hidden_features: int, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop = drop

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc1(x)
        dropout = self.drop if self.training else 0.0
        if dropout == 0.0 and torch.is_grad_enabled() and (h.requires_grad or self.fc2.weight.requires_grad):
            out = gelu_linear(h, self.fc2.weight, self.fc2.bias)
        else:
            out = self.fc2(F.dropout(F.gelu(h), dropout, self.training))
        return F.dropout(out, dropout, self.training)
