"""GPU rows (CUDA): what the CPU sections cannot show. ``benchmarks/gpu_check.sh`` runs this on
the device machine after the ``gpu`` tests; without CUDA it says so and exits 0.

    python -m benchmarks.gpu                   # the rows below (about a minute on an H200)
    python -m benchmarks.gpu --budget 120      # stop starting new cases after 120 s
    python -m benchmarks.gpu --output gpu.md   # also write the result to a file

* Train step (forward, cross-entropy, backward, SGD with momentum) of TimeSformer-B at 8 x 224,
  batch 8, bf16 autocast: our DnA and softmax TimeSformers and Hugging Face's
  ``TimesformerForVideoClassification`` (skipped if ``transformers`` is absent): ms, clips/s,
  peak memory. Then inference clips/s of the same three (bf16 autocast, no grad).
* The memory curve of issue 24 point 2: DnA TimeSformer-B (12 blocks), batch 1, T = 8, 16, 32
  frames, with and without ``grad_checkpointing``, float32 and bf16 autocast: peak memory and
  step time, and from it the longest clip within 24 and 80 GiB.

Timing: cases interleaved round by round (as :func:`benchmarks.harness.interleaved`), each call
between two ``torch.cuda.synchronize()``, median over rounds. Memory, from
``torch.cuda.max_memory_allocated()`` over one step after a warm-up step: "peak MiB" is the peak
above what was live before the step (the CPU rows' meaning: activations, gradients,
workspaces); "total peak MiB" is the whole allocation with only that model on the GPU
(parameters and optimiser state included): what must fit on a card. float32 matmuls stay
float32 (torch's default; no TF32).

Imports torch, einops, timm and ``dna_video.models`` (and ``transformers`` for its rows): no
Lightning, no video decoders, so the device machine's own Python runs it from source.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .harness import Row, markdown_table
from .model import train_step  # autocast on the video's device

__all__ = ["run", "main", "BASE_B8", "CURVE_FRAMES"]

SECTION = "gpu"
#: Not on the GPU machine: a note says so if anything here imported one of them.
ABSENT_THERE = ("lightning", "pytorch_lightning", "decord", "av", "jsonargparse", "pytorchvideo")
CURVE_FRAMES = (8, 16, 32)
CARDS_GIB = (24, 80)


@dataclass(frozen=True)
class Plan:
    """Sizes of one run: the full one on a GPU, a tiny one for a smoke run on the CPU."""

    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    patch_size: int = 16
    img_size: int = 224
    batch: int = 8
    frames: int = 8
    curve_frames: tuple[int, ...] = CURVE_FRAMES
    rounds: int = 10
    curve_rounds: int = 3
    warmup: int = 2
    name: str = "TimeSformer-B"


TINY = Plan(embed_dim=64, depth=2, num_heads=2, patch_size=8, img_size=32, batch=2, frames=4,
            curve_frames=(2, 4), rounds=1, curve_rounds=1, warmup=1, name="a tiny TimeSformer (CPU smoke run)")


def _geometry(plan: Plan, frames: int, batch: int):
    from .model import Geometry

    return Geometry(plan.embed_dim, plan.depth, plan.num_heads, plan.patch_size, plan.img_size, frames, batch)


BASE_B8 = Plan()


class Clock:
    """Wall time of a call on ``device`` (synchronised on CUDA) and the budget left."""

    def __init__(self, device: torch.device, budget_s: float) -> None:
        self.device = device
        self.deadline = time.perf_counter() + budget_s

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def time(self, fn: Callable[[], object]) -> float:
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start

    def interleaved(self, cases: dict[str, Callable[[], object]], rounds: int, warmup: int = 2) -> dict[str, float]:
        """Median seconds per call, the cases interleaved, order rotated each round."""
        names = list(cases)
        for name in names:
            for _ in range(warmup):
                self.time(cases[name])
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                times[name].append(self.time(cases[name]))
        return {name: statistics.median(values) for name, values in times.items()}

    def peak_mib(self, fn: Callable[[], object]) -> tuple[float, float]:
        """(peak above what was live before ``fn``, total peak), MiB. Off CUDA (the smoke run)
        NaN: the CPU rows of ``python -m benchmarks`` measure CPU memory."""
        if self.device.type != "cuda":
            fn()
            return float("nan"), float("nan")
        gc.collect()
        self.sync()
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        fn()
        self.sync()
        peak = torch.cuda.max_memory_allocated(self.device)
        return (peak - before) / 2**20, peak / 2**20


def inference(model: nn.Module, video: torch.Tensor) -> Callable[[], None]:
    model.eval()

    def step() -> None:
        with torch.no_grad(), torch.autocast(video.device.type, dtype=torch.bfloat16):
            model(video)

    return step


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _hf_available() -> bool:
    try:
        from transformers import TimesformerForVideoClassification  # noqa: F401
    except Exception:  # absent, or present but broken on this machine
        return False
    return True


def _models(plan: Plan, device: torch.device, notes: list[str]) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """Our DnA and softmax TimeSformers and (where it imports and builds) Hugging Face's, each
    with its input: the same clips, (B, C, T, H, W) for ours, (B, T, C, H, W) for HF."""
    from .model import build_hf, build_ours

    g = _geometry(plan, plan.frames, plan.batch)
    gen = torch.Generator().manual_seed(0)
    video = torch.randn(plan.batch, 3, plan.frames, plan.img_size, plan.img_size, generator=gen).to(device)
    torch.manual_seed(0)
    with torch.device(device):  # initialised on the device: seconds, not a minute of CPU init
        models = {"DnA": (build_ours(g, "dna"), video), "softmax": (build_ours(g, "softmax"), video)}
        if not _hf_available():
            notes.append("Hugging Face rows skipped: `transformers` (TimesformerForVideoClassification) "
                         "does not import here.")
            return models
        try:
            models["HF"] = (build_hf(g), video.transpose(1, 2).contiguous())
        except Exception as error:  # a baseline that fails to build here must not stop our rows
            notes.append(f"Hugging Face rows skipped: building the model failed: {error!r}")
    return models


def whole_model_rows(plan: Plan, clock: Clock, notes: list[str]) -> list[Row]:
    """Train step and inference of DnA, softmax and HF at TimeSformer-B, bf16 autocast."""
    from .model import NUM_CLASSES, flop_ratio

    device = clock.device
    models = _models(plan, device, notes)
    target = torch.randint(0, NUM_CLASSES, (plan.batch,), generator=torch.Generator().manual_seed(1)).to(device)
    steps = {name: train_step(m, video, target, bf16=True) for name, (m, video) in models.items()}
    if "HF" in steps:
        try:
            steps["HF"]()
        except Exception as error:
            notes.append(f"Hugging Face rows skipped: its train step failed here: {error!r}")
            del steps["HF"], models["HF"]
            _free(device)
    hf = "HF" in steps
    t = clock.interleaved(steps, rounds=plan.rounds, warmup=plan.warmup)
    memory = {name: clock.peak_mib(step) for name, step in steps.items()}
    g = _geometry(plan, plan.frames, plan.batch)
    case = f"train step, bf16 autocast, {g.describe()}"
    ms = {name: seconds * 1e3 for name, seconds in t.items()}
    rate = {name: plan.batch / seconds for name, seconds in t.items()}
    rows = [Row(SECTION, case, "ms", "DnA", ms["DnA"], "our softmax", ms["softmax"],
                f"FLOP ratio {flop_ratio(g):.2f}"),
            Row(SECTION, case, "clips/s", "DnA", rate["DnA"], "our softmax", rate["softmax"]),
            Row(SECTION, case, "peak MiB", "DnA", memory["DnA"][0], "our softmax", memory["softmax"][0])]
    if hf:
        rows += [
            Row(SECTION, case, "ms", "our softmax", ms["softmax"], "HF softmax", ms["HF"]),
            Row(SECTION, case, "ms", "DnA", ms["DnA"], "HF softmax", ms["HF"]),
            Row(SECTION, case, "clips/s", "DnA", rate["DnA"], "HF softmax", rate["HF"]),
            Row(SECTION, case, "peak MiB", "our softmax", memory["softmax"][0], "HF softmax", memory["HF"][0]),
            Row(SECTION, case, "peak MiB", "DnA", memory["DnA"][0], "HF softmax", memory["HF"][0]),
        ]
    del steps
    _free(device)

    if clock.left() > 0:
        case = f"inference, bf16 autocast, {g.describe()}"
        t = clock.interleaved({name: inference(m, video) for name, (m, video) in models.items()},
                              rounds=plan.rounds, warmup=plan.warmup)
        rate = {name: plan.batch / seconds for name, seconds in t.items()}
        rows.append(Row(SECTION, case, "clips/s", "DnA", rate["DnA"], "our softmax", rate["softmax"],
                        f"FLOP ratio 1/{flop_ratio(g):.2f}"))
        if hf:
            rows += [Row(SECTION, case, "clips/s", "our softmax", rate["softmax"], "HF softmax", rate["HF"]),
                     Row(SECTION, case, "clips/s", "DnA", rate["DnA"], "HF softmax", rate["HF"])]
    else:
        notes.append("inference rows skipped: out of time budget")
    del models, target
    _free(device)
    return rows


def _checkpointing(model: nn.Module, step: Callable[[], None], on: bool) -> Callable[[], None]:
    """``step`` with the model's ``grad_checkpointing`` set to ``on``."""
    def run() -> None:
        model.grad_checkpointing = on
        step()
    return run


def memory_curve_rows(plan: Plan, clock: Clock, notes: list[str]) -> list[Row]:
    """DnA at batch 1 for each T, with and without grad_checkpointing, float32 and bf16."""
    from .model import NUM_CLASSES, build_ours

    device = clock.device
    rows: list[Row] = []
    totals: dict[tuple[str, bool], dict[int, float]] = {}
    for precision in ("fp32", "bf16"):
        for frames in plan.curve_frames:
            if clock.left() <= 0:
                notes.append(f"memory curve from {precision} T={frames} on skipped: out of time budget")
                _card_notes(plan, totals, notes)
                return rows
            g = _geometry(plan, frames, 1)
            torch.manual_seed(0)
            with torch.device(device):
                model = build_ours(g, "dna")
            gen = torch.Generator().manual_seed(0)
            video = torch.randn(1, 3, frames, plan.img_size, plan.img_size, generator=gen).to(device)
            target = torch.randint(0, NUM_CLASSES, (1,), generator=gen).to(device)
            step = train_step(model, video, target, bf16=precision == "bf16")
            cases = {"plain": _checkpointing(model, step, False), "checkpointed": _checkpointing(model, step, True)}
            t = clock.interleaved(cases, rounds=plan.curve_rounds, warmup=1)
            memory = {name: clock.peak_mib(fn) for name, fn in cases.items()}
            case = f"memory curve, DnA, {precision}{' autocast' if precision == 'bf16' else ''}, {g.describe()}"
            rows += [
                Row(SECTION, case, "ms", "grad checkpointing", t["checkpointed"] * 1e3, "without", t["plain"] * 1e3),
                Row(SECTION, case, "peak MiB", "grad checkpointing", memory["checkpointed"][0],
                    "without", memory["plain"][0], "<= 0.4 at T=32 (issue 24)" if frames == 32 else ""),
                Row(SECTION, case, "total peak MiB", "grad checkpointing", memory["checkpointed"][1],
                    "without", memory["plain"][1]),
            ]
            for name, on in (("plain", False), ("checkpointed", True)):
                totals.setdefault((precision, on), {})[frames] = memory[name][1]
            del model, step, cases, video, target
            _free(device)
    _card_notes(plan, totals, notes)
    return rows


def longest_clip(total_mib: dict[int, float], card_gib: float) -> int | None:
    """Frames that fit in ``card_gib`` by the line through the two longest measured clips
    (memory grows linearly in T at batch 1: attention per frame and per patch)."""
    if len(total_mib) < 2:
        return None
    (t1, m1), (t2, m2) = sorted(total_mib.items())[-2:]
    slope = (m2 - m1) / (t2 - t1)
    if not slope > 0:  # also NaN (no memory measured)
        return None
    return int(t1 + (card_gib * 1024 - m1) / slope)


def _card_notes(plan: Plan, totals: dict[tuple[str, bool], dict[int, float]], notes: list[str]) -> None:
    """A note per curve: the longest clip within each card size."""
    for (precision, checkpointed), curve in totals.items():
        fits = [longest_clip(curve, gib) for gib in CARDS_GIB]
        if fits[0] is None:
            continue
        notes.append(
            f"Longest clip, DnA {plan.name}, batch 1, {precision}, "
            f"{'with' if checkpointed else 'without'} grad checkpointing: "
            + ", ".join(f"about {n} frames in {gib} GiB" for n, gib in zip(fits, CARDS_GIB))
            + " (allocated memory, the line through the two longest clips measured; the CUDA context"
            " and allocator slack come on top)")


def device_description(device: torch.device) -> str:
    """One line: the GPU, its memory and compute capability, the library versions."""
    versions = f"Python {platform.python_version()}, torch {torch.__version__}"
    try:
        import transformers

        versions += f", transformers {transformers.__version__}"
    except Exception:
        pass
    if device.type != "cuda":
        return f"CPU ({platform.processor() or platform.machine()}), {versions}"
    props = torch.cuda.get_device_properties(device)
    return (f"{props.name}, {props.total_memory / 2**30:.0f} GiB, compute capability {props.major}.{props.minor}, "
            f"{props.multi_processor_count} SMs; CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}; "
            f"{versions}; TF32 matmul {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}")


def run(device: torch.device, plan: Plan = BASE_B8, budget_s: float = 150.0) -> tuple[list[Row], list[str]]:
    """The rows and the notes under them."""
    clock = Clock(device, budget_s)
    notes: list[str] = []
    rows = whole_model_rows(plan, clock, notes)
    rows += memory_curve_rows(plan, clock, notes)
    loaded = [name for name in ABSENT_THERE if name in sys.modules]
    if loaded:
        notes.append(f"imported {loaded}, which the GPU machine lacks")
    return rows, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=150.0,
                        help="seconds after which no new case starts (default 150)")
    parser.add_argument("--output", default=None, help="also write the result (markdown) to this file")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="run every case at a tiny size on the CPU (checks the code, measures nothing)")
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        device, plan = torch.device("cpu"), TINY
    elif not torch.cuda.is_available():
        print("python -m benchmarks.gpu: no CUDA device here, nothing measured (the GPU rows need one; "
              "--cpu-smoke runs the code at a tiny size on the CPU)")
        return 0
    else:
        device, plan = torch.device("cuda"), BASE_B8
    start = time.perf_counter()
    command = "python -m benchmarks.gpu " + " ".join(sys.argv[1:] if argv is None else argv)
    rows, notes = run(device, plan, args.budget)
    text = "\n".join([
        f"`{command.strip()}` ({(time.perf_counter() - start) / 60:.1f} min)",
        "",
        f"Machine: {device_description(device)}",
        "",
        markdown_table(rows),
        "",
        *[f"- {note}" for note in notes],
        "" if notes else "",
        "Ratio = ours / baseline of the values shown (medians of interleaved rounds, each step between "
        "two CUDA synchronisations): below 1 is better for ms and MiB, above 1 for clips/s. Peak MiB: "
        "torch.cuda.max_memory_allocated() during one step above what was live before it; total peak "
        "MiB: the whole allocation, parameters and optimiser state included.",
    ])
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
