"""Run the benchmark suite and print one markdown table.

    python -m benchmarks                      # everything (under 10 minutes on 2 CPU cores)
    python -m benchmarks --sections attention model --rounds 9
    python -m benchmarks --sections variants  # every registered attention kind beside softmax
    python -m benchmarks --sections timeline  # a long video: throughput, memory flat in its length
    python -m benchmarks --sections decoders  # decord, PyAV and torchcodec on long videos
    python -m benchmarks --sections onnx      # an exported model on ONNX Runtime against PyTorch eager
    python -m benchmarks --quick              # fewer rounds and clips, a smoke run
    python -m benchmarks --compile            # also torch.compile (its first step compiles)
    python -m benchmarks --sections memory    # opt-in: long clips, grad checkpointing (20-40 min)
    python -m benchmarks --sections compile   # opt-in: inductor against eager (several minutes of compiling)
    python -m benchmarks --sections startup --startup-baseline DIR   # opt-in: commands' start-up, two checkouts
    python -m benchmarks --output results.md  # also write the table to a file

Run it from the repository root, so that this checkout's ``dna_video`` is the one measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shlex
import sys
import time

os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")

import torch

from . import attention, compiled, data, decoders, memory, model, onnx_runtime, startup, timeline, variants
from .harness import code_description, machine_description, markdown_table

SECTIONS = ("attention", "model", "variants", "data", "decoders", "timeline", "onnx")
# Run only when named: each takes many minutes (real TimeSformer-B steps up to 12 blocks and 32
# frames; inductor's compilation; fresh processes of two checkouts).
OPT_IN = ("memory", "compile", "startup")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", nargs="+", choices=SECTIONS + OPT_IN, default=list(SECTIONS),
                        help=f"default: {' '.join(SECTIONS)}; opt-in: {' '.join(OPT_IN)}")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per comparison (median)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds and clips: a smoke run")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of the DnA model")
    parser.add_argument("--cache", default=data.default_cache(), help="where generated benchmark videos are kept")
    parser.add_argument("--startup-baseline", default=None, metavar="DIR",
                        help="startup: another checkout to measure beside this one (e.g. a git worktree of an older commit)")
    parser.add_argument("--output", default=None, help="also write the result (markdown) to this file")
    args = parser.parse_args(argv)

    if "model" in args.sections and importlib.util.find_spec("transformers") is None:
        parser.error("the model section compares with Hugging Face's TimeSformer: pip install -e '.[bench]' "
                     "(or leave it out: --sections attention data)")
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    command = "python -m benchmarks " + shlex.join(sys.argv[1:] if argv is None else argv)
    header, code = machine_description(), code_description()
    start = time.perf_counter()
    rows, notes = [], []
    for section in args.sections:
        t0 = time.perf_counter()
        if section == "attention":
            rows += attention.run(rounds=args.rounds + 4, quick=args.quick)
        elif section == "model":
            rows += model.run(rounds=args.rounds, quick=args.quick, compile=args.compile)
        elif section == "variants":
            rows += variants.run(rounds=args.rounds, quick=args.quick)
        elif section == "data":
            # Each data epoch starts its own workers and takes seconds to minutes: fewer rounds than
            # the model cases, but at least 3 for a real median (2 in a --quick smoke run).
            rows += data.run(args.cache, rounds=2 if args.quick else max(3, args.rounds // 2), quick=args.quick)
        elif section == "timeline":
            rows += timeline.run(args.cache, rounds=args.rounds, quick=args.quick)
        elif section == "decoders":
            rows += decoders.run(args.cache, rounds=2 if args.quick else max(3, args.rounds // 2), quick=args.quick)
        elif section == "onnx":
            rows += onnx_runtime.run(rounds=args.rounds, quick=args.quick)
        elif section == "memory":
            # Steps of seconds to a minute: 3 rounds (1 in a --quick smoke run).
            rows += memory.run(rounds=min(3, args.rounds), quick=args.quick, notes=notes)
        elif section == "compile":
            rows += compiled.run(rounds=args.rounds, quick=args.quick, notes=notes)
        elif section == "startup":
            rows += startup.run(args.cache, rounds=args.rounds, quick=args.quick, baseline=args.startup_baseline,
                                notes=notes)
        # Progress, and the rows so far in case a later section fails.
        print(f"[{section}: {time.perf_counter() - t0:.0f} s]\n{markdown_table(rows)}", file=sys.stderr, flush=True)
    total = time.perf_counter() - start
    text = "\n".join([
        f"`{command}` ({total / 60:.1f} min)",
        "",
        f"Machine: {header} (at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())})",
        "",
        f"Code: {code}",
        "",
        markdown_table(rows),
        "",
        "Ratio = ours / baseline of the values shown (medians of interleaved rounds, wall clock): "
        "below 1 is better for ms and MiB, above 1 for clips/s. CPU-time ratio: the same calls "
        "timed by this process's CPU time, which leaves out waiting for a core (steadier on a "
        "shared machine; blank for the data rows, whose work is in worker processes). "
        "Peak MiB: peak of live tensor memory during one call above what was live before it.",
        *(["", "Notes:", *(f"- {note}" for note in notes)] if notes else []),
    ])
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return text


if __name__ == "__main__":
    main()
