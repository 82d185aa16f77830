"""Where DnA's attention time goes against softmax MHSA, forward + backward, at the attention
section's TimeSformer-B shapes: the evidence for "DnA at its floor" (benchmarks/README.md).

    python -m benchmarks.profile_attention               # 2 threads, 3 profiled steps each
    python -m benchmarks.profile_attention --threads 1 --steps 5

The FLOP floor (:func:`.attention.flop_ratio`) counts multiply-adds: the projections (6D^2 per
token for DnA, 4D^2 for MHSA) and the scores and values (2 x 2LD vs 2LD). The profile splits
each module's time (self CPU time, torch.profiler) into

* ``projections``: the linear layers' GEMMs (``addmm``, ``mm``; their ratio has a floor of 1.5);
* ``attention``: the scores, the normalisation and the values: the fused SDPA kernel and its
  backward, or the explicit path's batched matmuls and softmax (ratio floor 2: two branches);
* ``elementwise``: everything the floor does not count: the negated query, alpha's scale and
  its gradient's reduction, the sum of the branches, copies to and from the head layout.

and prints each bucket's DnA / MHSA ratio beside the floor, and what the step's ratio would be
if the elementwise work cost DnA what it costs MHSA. Shares are steadier than absolute times
on a shared machine; compare the buckets, not the milliseconds, between runs.

``--negative-scale`` also times, interleaved, the fused path as the library runs it (Q-
negated) against the softmin taken by SDPA's scale (``scale=-1/sqrt(d)``, no negated copy):
the saving the library forgoes because ONNX's SDPA splits the scale as its square root.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from dna_video.models.attention import DenoisingAttention, SoftmaxAttention

from .attention import DIM, HEADS, SHAPES, flop_ratio

__all__ = ["bucket_of", "profile_buckets", "negative_scale_ratio", "main"]

PROJECTION_OPS = {"aten::addmm", "aten::mm"}
ATTENTION_OPS = ("scaled_dot_product", "flash_attention", "aten::bmm", "aten::_softmax", "aten::_softmax_backward_data",
                 "aten::baddbmm")
# Ops that only call others, and autograd's own events: their children are counted in their
# buckets, their self time (bookkeeping) is elementwise.
WRAPPERS = {"aten::linear", "aten::matmul", "aten::softmax", "aten::scaled_dot_product_attention"}


def bucket_of(op: str) -> str:
    """The bucket of a profiled op name (see the module's docstring)."""
    if op in WRAPPERS or op.startswith(("autograd::", "ProfilerStep")):
        return "elementwise"
    if op in PROJECTION_OPS:
        return "projections"
    if any(part in op for part in ATTENTION_OPS):
        return "attention"
    return "elementwise"


def profile_buckets(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor, steps: int) -> tuple[float, Counter]:
    """(ms per step, ms per bucket per step) of ``steps`` forward + backward passes."""

    def step() -> None:
        module(x).backward(grad)
        module.zero_grad(set_to_none=True)
        x.grad = None

    for _ in range(2):  # warm-up: first-call allocations and kernel selection
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    buckets: Counter = Counter()
    for event in prof.key_averages():
        buckets[bucket_of(event.key)] += event.self_cpu_time_total / 1e3 / steps
    return sum(buckets.values()), buckets


def negative_scale_ratio(batch: int, length: int, rounds: int) -> tuple[float, float, float]:
    """CPU-time ratio (median, lowest, highest over ``rounds``) of the negative branch with the
    scale negated over the branch as the library computes it (Q- negated), forward + backward."""
    q, k, v = (torch.randn(batch, HEADS, length, DIM // HEADS, requires_grad=True) for _ in range(3))
    grad = torch.randn(batch, HEADS, length, DIM // HEADS)
    scale = (DIM // HEADS) ** -0.5
    branches = {"negated query": lambda: F.scaled_dot_product_attention(-q, k, v),
                "negative scale": lambda: F.scaled_dot_product_attention(q, k, v, scale=-scale)}
    ratios = []
    for r in range(rounds):
        spent = {}
        for name in sorted(branches, reverse=bool(r % 2)):  # alternate which goes first
            branches[name]().backward(grad)  # warm
            start = time.process_time()
            for _ in range(3):
                branches[name]().backward(grad)
            spent[name] = time.process_time() - start
        ratios.append(spent["negative scale"] / spent["negated query"])
    return statistics.median(ratios), min(ratios), max(ratios)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_attention", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="profiled forward + backward passes per module")
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=list(SHAPES))
    parser.add_argument("--negative-scale", action="store_true",
                        help="also time the negative branch with SDPA's scale negated against Q- negated")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds of --negative-scale")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    modules = {"DnA": DenoisingAttention(DIM, HEADS), "MHSA": SoftmaxAttention(DIM, HEADS)}
    print(f"torch {torch.__version__}, {args.threads} threads, fp32, {args.steps} profiled steps; "
          "ms per forward + backward (self CPU time per bucket)")
    print("| shape | bucket | DnA ms | MHSA ms | DnA / MHSA | floor |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.shapes:
        batch, length = SHAPES[name]
        x = torch.randn(batch, length, DIM, requires_grad=True)
        grad = torch.randn(batch, length, DIM)
        (dna_total, dna), (mhsa_total, mhsa) = (profile_buckets(m, x, grad, args.steps) for m in modules.values())
        case = f"{name} {batch}x{length}"
        floors = {"projections": 1.5, "attention": 2.0, "elementwise": None}
        for bucket, floor in floors.items():
            ratio = dna[bucket] / mhsa[bucket] if mhsa[bucket] else float("nan")
            print(f"| {case} | {bucket} | {dna[bucket]:.1f} | {mhsa[bucket]:.1f} | {ratio:.2f} | "
                  f"{'-' if floor is None else f'{floor:.2f}'} |")
        # The step's ratio with DnA's elementwise work at MHSA's cost: what the floor-counted ops give.
        without = (dna_total - dna["elementwise"] + mhsa["elementwise"]) / mhsa_total
        print(f"| {case} | total | {dna_total:.1f} | {mhsa_total:.1f} | {dna_total / mhsa_total:.2f} | "
              f"{flop_ratio(DIM, length):.2f} (elementwise at MHSA's cost: {without:.2f}) |")
    if args.negative_scale:
        print("\nnegative branch, forward + backward, CPU time with scale=-1/sqrt(d) / with Q- negated "
              f"(median over {args.rounds} interleaved rounds, lowest-highest):")
        for name in args.shapes:
            median, low, high = negative_scale_ratio(*SHAPES[name], args.rounds)
            print(f"  {name}: {median:.3f} ({low:.3f}-{high:.3f})")


if __name__ == "__main__":
    main()
