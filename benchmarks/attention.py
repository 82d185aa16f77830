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

Then DnA's training path in plain autograd (the library's) against the same module with a
hand-written backward over one fused projection (:mod:`benchmarks.handwritten_dna`),
forward+backward in fp32 and under bf16 autocast, at the TimeSformer-B spatial and temporal
shapes and at the quickstart's (D 64, 2 heads, 8 x 64 x 64 / 8, batch 8). Each round times
both once, back to back in alternating order; the value columns are median wall times, the
CPU-time ratio the median per-round ratio of CPU times, and the spread (lowest-highest
per-round ratio, wall and CPU time) is printed beside them.

Last, the training path's choice under bf16 autocast on CPU: DnA with the explicit path up to
``explicit_max_len_cpu_low_precision`` tokens (the default) against the fused kernel forced
at every length past ``explicit_max_len``, at the spatial shapes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from dna_video.models.attention import Attention, DenoisingAttention, SoftmaxAttention
from dna_video.models.mlp import Mlp

from .handwritten_dna import HandWrittenDnA
from .harness import Row, interleaved, peak_memory, time_row

__all__ = ["run", "SHAPES", "flop_ratio", "projection_rows", "low_precision_path_rows", "paired_ratios"]

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
    return rows + projection_rows(rounds=rounds) + low_precision_path_rows(rounds=rounds)


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


#: (dim, heads, batch of sequences, tokens) for the DnA training path comparison.
PROJECTION_SHAPES = {
    "TimeSformer-B spatial": (768, 12, 8, 197),
    "TimeSformer-B temporal": (768, 12, 196, 8),
    "quickstart spatial": (64, 2, 64, 65),
    "quickstart temporal": (64, 2, 512, 8),
}


def paired_ratios(ours: Callable[[], object], baseline: Callable[[], object], rounds: int) -> dict[str, float]:
    """Per-round time ratios ours / baseline, each round timing both back to back (order
    alternating), after one untimed call of each, by the wall clock and by this process's CPU
    time. Returns the median wall seconds of each, and for ``wall`` and ``cpu`` the median
    per-round ratio and the lowest and highest one (the run-to-run spread)."""
    ours(), baseline()
    samples: dict[str, list[tuple[float, float]]] = {"ours": [], "baseline": []}
    for r in range(rounds):
        pair = [("ours", ours), ("baseline", baseline)]
        for name, fn in pair if r % 2 == 0 else pair[::-1]:
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            samples[name].append((time.perf_counter() - start, time.process_time() - start_cpu))
    result = {name: statistics.median(wall for wall, _ in times) for name, times in samples.items()}
    for i, clock in enumerate(("wall", "cpu")):
        ratios = [a[i] / b[i] for a, b in zip(samples["ours"], samples["baseline"])]
        result.update({clock: statistics.median(ratios), f"{clock} low": min(ratios), f"{clock} high": max(ratios)})
    return result


def _train_step(module: nn.Module, x: torch.Tensor, grad: torch.Tensor, bf16: bool) -> Callable[[], None]:
    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = module(x)
        out.backward(grad.to(out.dtype))
        module.zero_grad(set_to_none=True)  # at the end: see harness.peak_memory
        x.grad = None

    return step


def projection_rows(rounds: int = 14) -> list[Row]:
    """Plain autograd (the library's DnA) against the hand-written backward, fwd+bwd time and
    peak memory, fp32 and bf16 autocast. Ratio = plain / hand-written: above 1 means the
    hand-written one is faster or leaner."""
    rows: list[Row] = []
    for name, (dim, heads, batch, length) in PROJECTION_SHAPES.items():
        torch.manual_seed(0)
        plain = DenoisingAttention(dim, heads)
        handwritten = HandWrittenDnA(dim, heads)
        handwritten.load_state_dict(plain.state_dict())
        x = torch.randn(batch, length, dim, requires_grad=True)
        grad = torch.randn(batch, length, dim)
        case = f"DnA training path, {name} {batch}x{length}, D {dim}, {heads} heads"
        for bf16 in (False, True):
            precision = "bf16 autocast" if bf16 else "fp32"
            steps = [_train_step(m, x, grad, bf16) for m in (plain, handwritten)]
            t = paired_ratios(*steps, rounds=rounds)
            mem = [peak_memory(step) / 2**20 for step in steps]
            spread = (f"per-round ratios: wall {t['wall low']:.2f}-{t['wall high']:.2f}, "
                      f"CPU time {t['cpu low']:.2f}-{t['cpu high']:.2f}")
            rows.append(Row("attention", case, f"fwd+bwd ms, {precision}", "plain autograd", t["ours"] * 1e3,
                            "hand-written backward", t["baseline"] * 1e3, spread, cpu_ratio=t["cpu"]))
            rows.append(Row("attention", case, f"fwd+bwd peak MiB, {precision}", "plain autograd", mem[0],
                            "hand-written backward", mem[1]))
    return rows


def low_precision_path_rows(rounds: int = 14) -> list[Row]:
    """DnA fwd+bwd under bf16 autocast: the explicit path (the default up to
    ``explicit_max_len_cpu_low_precision`` tokens on CPU) against the fused kernel."""
    rows: list[Row] = []
    for name in ("TimeSformer-B spatial", "quickstart spatial"):
        dim, heads, batch, length = PROJECTION_SHAPES[name]
        torch.manual_seed(0)
        explicit, fused = DenoisingAttention(dim, heads), DenoisingAttention(dim, heads)
        fused.load_state_dict(explicit.state_dict())
        fused.explicit_max_len_cpu_low_precision = 0
        x = torch.randn(batch, length, dim, requires_grad=True)
        grad = torch.randn(batch, length, dim)
        steps = [_train_step(m, x, grad, bf16=True) for m in (explicit, fused)]
        t = paired_ratios(*steps, rounds=rounds)
        mem = [peak_memory(step) / 2**20 for step in steps]
        case = f"DnA bf16 autocast, {name} {batch}x{length}, D {dim}, {heads} heads"
        spread = (f"per-round ratios: wall {t['wall low']:.2f}-{t['wall high']:.2f}, "
                  f"CPU time {t['cpu low']:.2f}-{t['cpu high']:.2f}")
        rows.append(Row("attention", case, "fwd+bwd ms", "explicit path", t["ours"] * 1e3,
                        "fused kernel", t["baseline"] * 1e3, spread, cpu_ratio=t["cpu"]))
        rows.append(Row("attention", case, "fwd+bwd peak MiB", "explicit path", mem[0], "fused kernel", mem[1]))
    return rows
