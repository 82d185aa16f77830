"""Section 1: DnA against softmax MHSA, one attention module, at the TimeSformer-B shapes.

D = 768, 12 heads, one 8 x 224 x 224 clip:

* spatial: B*T = 8 sequences of 197 tokens (196 patches + the cls copy);
* temporal: B*196 = 196 sequences of 8 tokens;
* joint: one sequence of 8 x 196 + 1 = 1569 tokens (joint space-time attention).

Forward (no grad) and forward+backward times are interleaved medians; memory is the peak of
live tensor bytes during forward+backward, above the input and the parameters.

At the joint sequence two more comparisons: a whole pre-norm transformer block (attention +
MLP, as in joint space-time attention) with each attention, and, for scale, MHSA written out
with its L x L maps kept for backward (what Hugging Face's TimeSformer attention does).
"""

from __future__ import annotations

import torch
from torch import nn

from dna_video.attention import Attention, DenoisingAttention, SoftmaxAttention
from dna_video.mlp import Mlp

from .harness import Row, interleaved, peak_memory, time_row

__all__ = ["run", "SHAPES", "flop_ratio"]

DIM, HEADS = 768, 12
SHAPES = {"spatial": (8, 197), "temporal": (196, 8), "joint": (1, 1569)}


def flop_ratio(dim: int, length: int) -> float:
    """DnA / MHSA multiply-adds per token: projections 6D^2 vs 4D^2, scores and values
    2 x 2LD vs 2LD (dna.md)."""
    return (6 * dim * dim + 4 * length * dim) / (4 * dim * dim + 2 * length * dim)


class JointBlock(nn.Module):
    """Pre-norm transformer block over the whole sequence: x + attn(norm(x)), then the MLP."""

    def __init__(self, attn: Attention) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(attn.dim, eps=1e-6), attn
        self.norm2, self.mlp = nn.LayerNorm(attn.dim, eps=1e-6), Mlp(attn.dim, 4 * attn.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def _fwd_bwd(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor, forward=None):
    forward = forward or module

    def step() -> None:
        forward(x).backward(grad)
        module.zero_grad(set_to_none=True)  # at the end: see harness.peak_memory
        x.grad = None

    return step


def _fwd(module: torch.nn.Module, x: torch.Tensor):
    def step() -> None:
        with torch.no_grad():
            module(x)

    return step


def run(rounds: int = 7, quick: bool = False) -> list[Row]:
    rows: list[Row] = []
    torch.manual_seed(0)
    modules = {"DnA": DenoisingAttention(DIM, HEADS), "MHSA": SoftmaxAttention(DIM, HEADS)}
    for name, (batch, length) in SHAPES.items():
        case = f"{name} {batch}x{length}, D {DIM}, {HEADS} heads"
        x = torch.randn(batch, length, DIM, requires_grad=True)
        grad = torch.randn(batch, length, DIM)
        n = max(3, rounds // 2) if quick or name == "joint" else rounds
        fwd = interleaved({k: _fwd(m, x) for k, m in modules.items()}, n)
        both = interleaved({k: _fwd_bwd(m, x, grad) for k, m in modules.items()}, n)
        mem = {k: peak_memory(_fwd_bwd(m, x, grad)) / 2**20 for k, m in modules.items()}
        floor = flop_ratio(DIM, length)
        rows.append(time_row("attention", case, "fwd ms", "DnA", fwd["DnA"], "MHSA", fwd["MHSA"],
                             f"FLOP ratio {floor:.2f}"))
        rows.append(time_row("attention", case, "fwd+bwd ms", "DnA", both["DnA"], "MHSA", both["MHSA"],
                             f"<= 1.6 (FLOP ratio {floor:.2f})", limit=1.6))
        mem_target = ("<= 1.3", mem["DnA"] / mem["MHSA"] <= 1.3) if name == "joint" else ("", None)
        rows.append(Row("attention", case, "fwd+bwd peak MiB", "DnA", mem["DnA"], "MHSA", mem["MHSA"], *mem_target))
        if name == "joint":
            rows += _joint_extras(case, modules, x, grad, n, mem["DnA"])
    return rows


def _joint_extras(
    case: str, modules: dict, x: torch.Tensor, grad: torch.Tensor, rounds: int, dna_mem: float
) -> list[Row]:
    torch.manual_seed(0)
    blocks = {k: JointBlock(m) for k, m in modules.items()}
    both = interleaved({k: _fwd_bwd(b, x, grad) for k, b in blocks.items()}, rounds)
    mem = {k: peak_memory(_fwd_bwd(b, x, grad)) / 2**20 for k, b in blocks.items()}
    mhsa = modules["MHSA"]
    with_maps = peak_memory(_fwd_bwd(mhsa, x, grad, lambda x: mhsa.forward_with_maps(x)[0])) / 2**20
    block = case.replace("D 768", "block (attention + MLP), D 768")
    return [
        time_row("attention", block, "fwd+bwd ms", "DnA block", both["DnA"], "MHSA block", both["MHSA"]),
        Row("attention", block, "fwd+bwd peak MiB", "DnA block", mem["DnA"], "MHSA block", mem["MHSA"],
            "<= 1.3", mem["DnA"] / mem["MHSA"] <= 1.3),
        Row("attention", case, "fwd+bwd peak MiB", "DnA", dna_mem, "MHSA keeping its L x L maps", with_maps),
    ]
