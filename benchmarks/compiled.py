"""Section ``compile`` (opt-in: ``python -m benchmarks --sections compile``): ``torch.compile``
(inductor, the default backend; what ``--model.network.compile true`` does, in place) against
eager, for our DnA TimeSformer:

* train step (forward, cross-entropy, backward, SGD with momentum) and inference (eval, no
  grad), each its own compiled graph;
* at the quickstart's geometry (``tiny``: D 64, 2 heads, 4 blocks, 8 x 64 x 64, batch 8) and at
  TimeSformer-B width with 2 blocks (8 x 224 x 224, batch 1; every block a TimeSformer-B block);
* the first call apart (``first call s``: compilation, against eager's first call), then the
  steady state: medians of interleaved rounds, after that first call.

Where compiled is not faster, ``python -m benchmarks.compiled --profile`` shows each op's share of
the eager and the compiled train step (``torch.profiler``; compiled kernels appear as one
``CompiledFunction`` / ``Torch-Compiled Region`` entry around inductor's own ops).
"""

from __future__ import annotations

import argparse
import copy
import shutil
import time
from collections.abc import Callable

import torch
from torch import nn

from .harness import Row, interleaved, time_row
from .model import QUICKSTART, REDUCED, Geometry, _inputs, build_ours, inference, train_step

__all__ = ["run", "GEOMETRIES", "main"]

SECTION = "compile"
GEOMETRIES: dict[str, Geometry] = {"quickstart (tiny)": QUICKSTART, "TimeSformer-B width, 2 blocks": REDUCED}


def _first_call(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _pair(g: Geometry) -> tuple[nn.Module, nn.Module]:
    """An eager DnA model and a copy compiled in place (same weights, same parameter names)."""
    torch.manual_seed(0)
    eager = build_ours(g, "dna")
    compiled = copy.deepcopy(eager)
    compiled.compile()
    return eager, compiled


def run(rounds: int = 5, quick: bool = False, notes: list[str] | None = None) -> list[Row]:
    notes = notes if notes is not None else []
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        notes.append("compile: skipped, inductor needs a C compiler on the CPU (none found)")
        return []
    rounds = max(3, rounds // 2) if quick else rounds
    rows: list[Row] = []
    for label, g in GEOMETRIES.items():
        torch._dynamo.reset()
        video, target = _inputs(g, hf=False)
        for mode in ("train step", "inference"):
            eager, compiled = _pair(g)
            if mode == "train step":
                cases = {"eager": train_step(eager, video, target), "compiled": train_step(compiled, video, target)}
            else:
                cases = {"eager": inference(eager, video), "compiled": inference(compiled, video)}
            first = {name: _first_call(fn) for name, fn in cases.items()}  # compiled: compiles
            t = interleaved(cases, rounds=rounds, warmup=1)
            case = f"{mode}, {label}: {g.describe()}"
            rows += [
                time_row(SECTION, case, "ms", "DnA compiled (inductor)", t["compiled"], "DnA eager", t["eager"]),
                Row(SECTION, case, "first call s", "DnA compiled (inductor)", first["compiled"], "DnA eager",
                    first["eager"]),
            ]
            del cases, eager, compiled
    notes.append("compile: 'first call s' is the first call after building the model (for the compiled "
                 "model: dynamo's tracing, AOT autograd and inductor's code generation); 'ms' the steady state")
    return rows


def main(argv: list[str] | None = None) -> None:
    """``--profile``: each op's share of the eager and the compiled train step and inference."""
    from .profile_step import op_shares

    parser = argparse.ArgumentParser(prog="python -m benchmarks.compiled", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", action="store_true", help="per-op shares, eager against compiled")
    parser.add_argument("--geometry", choices=list(GEOMETRIES), default="TimeSformer-B width, 2 blocks")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--top", type=int, default=15, help="ops shown per model")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.profile:
        parser.error("say what to do: --profile (the timed rows are python -m benchmarks --sections compile)")
    # Inductor's fused C++ kernels as their own profiler entries (else their time is the self
    # time of the compiled region).
    torch._inductor.config.cpp.enable_kernel_profile = True
    g = GEOMETRIES[args.geometry]
    video, target = _inputs(g, hf=False)
    for mode in ("train step", "inference"):
        for name, model in zip(("eager", "compiled (inductor)"), _pair(g)):
            step = train_step(model, video, target) if mode == "train step" else inference(model, video)
            step()  # compiles (the compiled model); op_shares warms up once more
            total, per_op = op_shares(step)
            print(f"== DnA {mode}, {name}: {total:.0f} ms of self CPU time per call ({g.describe()})")
            for op, ms in per_op.most_common(args.top):
                print(f"   {op[:70]:70s} {ms:9.1f} ms {100 * ms / total:5.1f}%")


if __name__ == "__main__":
    main()
