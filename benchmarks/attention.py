"""Section 1: DnA against softmax MHSA, one attention module, at the TimeSformer-B shapes.

D = 768, 12 heads, one 8 x 224 x 224 clip:

* spatial: B*T = 8 sequences of 197 tokens (196 patches + the cls copy);
* temporal: B*196 = 196 sequences of 8 tokens;
* joint: one sequence of 8 x 196 + 1 = 1569 tokens (joint space-time attention).

Forward (no grad) and forward+backward times are interleaved medians; memory is the peak of
live tensor bytes during forward+backward, above the input and the parameters.
"""

from __future__ import annotations

import torch

from dna_video.attention import DenoisingAttention, SoftmaxAttention

from .harness import Row, interleaved, peak_memory

__all__ = ["run", "SHAPES", "flop_ratio"]

DIM, HEADS = 768, 12
SHAPES = {"spatial": (8, 197), "temporal": (196, 8), "joint": (1, 1569)}


def flop_ratio(dim: int, length: int) -> float:
    """DnA / MHSA multiply-adds per token: projections 6D^2 vs 4D^2, scores and values
    2 x 2LD vs 2LD (dna.md)."""
    return (6 * dim * dim + 4 * length * dim) / (4 * dim * dim + 2 * length * dim)


def _fwd_bwd(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor):
    def step() -> None:
        module.zero_grad(set_to_none=True)
        module(x).backward(grad)

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
        rows.append(Row("attention", case, "fwd ms", "DnA", fwd["DnA"] * 1e3, "MHSA", fwd["MHSA"] * 1e3,
                        f"FLOP ratio {floor:.2f}"))
        ratio = both["DnA"] / both["MHSA"]
        rows.append(Row("attention", case, "fwd+bwd ms", "DnA", both["DnA"] * 1e3, "MHSA", both["MHSA"] * 1e3,
                        f"<= 1.6 (FLOP ratio {floor:.2f})", ratio <= 1.6))
        mem_target = ("<= 1.3", mem["DnA"] / mem["MHSA"] <= 1.3) if name == "joint" else ("", None)
        rows.append(Row("attention", case, "fwd+bwd peak MiB", "DnA", mem["DnA"], "MHSA", mem["MHSA"], *mem_target))
    return rows
