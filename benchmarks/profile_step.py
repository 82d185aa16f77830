"""Where a train step's time goes, per op, for our DnA TimeSformer and Hugging Face's, in fp32
and under bf16 autocast: the evidence behind the bf16 path choice (benchmarks/README.md).

    python -m benchmarks.profile_step                 # 1 thread, 2 profiled steps each
    python -m benchmarks.profile_step --threads 2 --top 20

The model section's reduced geometry (TimeSformer-B width, depth 2, 8 x 224 x 224, batch 1).
Printed: each op's share of the step (self CPU time, torch.profiler). Shares are steadier than
absolute times on a shared machine.
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from .model import REDUCED, _inputs, build_hf, build_ours, train_step


def op_shares(step, steps: int = 2) -> tuple[float, Counter]:
    """Milliseconds per step and each op's self CPU milliseconds per step."""
    step()  # warm-up: optimiser state, first allocations
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    per_op = Counter({e.key: e.self_cpu_time_total / 1e3 / steps for e in prof.key_averages()})
    return sum(per_op.values()), per_op


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_step", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=12, help="ops shown per model and precision")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = REDUCED
    for name, build, hf in (("DnA", lambda: build_ours(g, "dna"), False), ("HF softmax", lambda: build_hf(g), True)):
        torch.manual_seed(0)
        model = build()
        for bf16 in (False, True):
            total, per_op = op_shares(train_step(model, *_inputs(g, hf), bf16=bf16))
            print(f"== {name}, {'bf16 autocast' if bf16 else 'fp32'}: {total:.0f} ms per step ({g.describe()})")
            for op, ms in per_op.most_common(args.top):
                print(f"   {op:60s} {ms:9.1f} ms {100 * ms / total:5.1f}%")


if __name__ == "__main__":
    main()
