"""The interface every self-attention kind implements: (B, L, D) -> (B, L, D).

Every kind keeps the official ViT/TimeSformer parameter names (``qkv`` with rows [Q; K; V],
``proj``) so checkpoints map by name, and offers two paths:

* ``forward(x)``: the training path, through ``torch.nn.functional.scaled_dot_product_attention``
  so that no L x L matrix is kept for backward (the fused kernels recompute it). Exception:
  when gradients are needed and the sequence is short (:attr:`Attention.explicit_max_len`,
  e.g. the temporal attention over 8 frames; on CPU under bf16/fp16 up to
  :attr:`Attention.explicit_max_len_cpu_low_precision`), explicit batched matmuls (why these
  lengths: ``benchmarks/README.md``, "Why the code is the way it is").
* ``forward_with_maps(x)``: an explicit, written-out path that also returns the attention
  maps (for visualisation and analysis). Slow and memory hungry by design.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["Attention", "MultiHead", "split_heads", "merge_heads"]


def split_heads(x: Tensor, heads: list[int], head_dim: int) -> list[Tensor]:
    """(B, L, sum(heads) * d) -> one (B, n, L, d) view per entry n of ``heads``.

    The split happens on the (B, L, N, d) view and each piece is transposed afterwards, so
    that backward concatenates the gradients (which the SDPA kernels return in (B, L, n, d)
    memory order) directly in the (B, L, N * d) layout of the projection's output: no
    permuting copy of the whole gradient. ``split`` rather than slicing: the backward of a
    slice zero-fills a full-size buffer per slice.

    Plain tensor methods rather than einops here and in :func:`merge_heads`: they run several
    times per block, and ``torch.compile`` traces einops' pattern parsing anew at every call
    (about 0.1 s each on a 2-core CPU, most of a tiny model's compile time).
    """
    pieces = x.unflatten(-1, (sum(heads), head_dim)).split(heads, dim=2)
    return [t.transpose(1, 2) for t in pieces]  # b l n d -> b n l d


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, L, d) -> (B, L, H * d); a view when ``x`` is in (B, L, H, d) memory order."""
    return x.transpose(1, 2).flatten(2)  # b h l d -> b l (h d)


class MultiHead(nn.Module):
    """What every attention module has: the head split of the width, the score scale,
    dropout on the attention weights and the output projection (``proj``).

    Args:
        dim: token width D.
        num_heads: number of heads H; ``dim`` must be divisible by it.
        attn_drop: dropout on the attention weights. Keep 0 for training speed: the fused
            CPU kernel only runs without dropout, otherwise PyTorch falls back to a path that
            materialises the L x L matrix.
        proj_drop: dropout after the output projection.
    """

    def __init__(self, dim: int, num_heads: int, attn_drop: float = 0.0, proj_drop: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not divisible by num_heads={num_heads}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def _dropout_p(self) -> float:
        return self.attn_drop if self.training else 0.0

    def _output(self, out: Tensor) -> Tensor:
        """(B, H, L, d) per-head output -> output projection and dropout, (B, L, D)."""
        return self.proj_drop(self.proj(merge_heads(out)))


class Attention(MultiHead):
    """Interface of a multi-head self-attention module: (B, L, D) -> (B, L, D).

    Args:
        dim: token width D.
        num_heads: number of heads H; ``dim`` must be divisible by it.
        qkv_bias: bias on the query/key/value projections (the kind's own layers).
        attn_drop: dropout on the attention weights (keep 0, see :class:`MultiHead`).
        proj_drop: dropout after the output projection.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
    ) -> None:
        super().__init__(dim, num_heads, attn_drop, proj_drop)

    #: Longest sequence that takes the explicit path when gradients are needed (why this
    #: length: benchmarks/README.md, "Why the code is the way it is").
    explicit_max_len: int = 16
    #: The same on CPU under bf16/fp16 compute (autocast or inputs); the price is the L x L
    #: maps kept for backward (why: benchmarks/README.md, "Why the code is the way it is").
    explicit_max_len_cpu_low_precision: int = 256

    def _explicit(self, x: Tensor) -> bool:
        if not (torch.is_grad_enabled() and x.requires_grad):
            return False
        if x.shape[1] <= self.explicit_max_len:
            return True
        low_precision = (torch.bfloat16, torch.float16)
        return (
            x.device.type == "cpu"
            and x.shape[1] <= self.explicit_max_len_cpu_low_precision
            and (x.dtype in low_precision
                 or (torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") in low_precision))
        )

    def forward(self, x: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def forward_with_maps(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:  # pragma: no cover
        """Output and attention maps, each map (B, H, L, L), rows summing to 1."""
        raise NotImplementedError
