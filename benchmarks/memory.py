"""Section ``memory`` (opt-in: ``python -m benchmarks --sections memory``): long clips in bounded
memory. Peak memory and step time of a TimeSformer-B train step (our DnA, batch 1, forward,
cross-entropy, backward, SGD with momentum) at T = 8, 16 and 32 frames of 224 x 224, without
activation checkpointing and with each of its settings (``grad_checkpointing`` with
``grad_checkpointing_every`` / ``grad_checkpointing_part``, :data:`SETTINGS`).

* Real runs at depth 2, and at depth 1 for the extrapolation: every block is a TimeSformer-B
  block, so peak(depth) = base + depth x per-block, base and per-block from the depth 1 and 2
  runs (the same line for the step time). A setting that alternates blocks (every 2nd) is
  periodic in pairs of blocks: its line comes from depth 2 and 4.
* That line at depth 12 (the full TimeSformer-B), checked against one real depth-12 run at
  T = 8, predicted and measured side by side. Where a real run's predicted peak is above
  :data:`REAL_RUN_LIMIT_GIB` (this machine's share), it is not run: the row says so.
* The longest clip that trains on a 24 and an 80 GiB card, from the depth-12 lines: the
  parameters and SGD momentum (what is live before a step) plus the step's peak, linear in T
  through the estimates at 16 and 32 frames. An estimate from CPU memory, until the GPU check
  (``benchmarks/gpu.py``) measures it on a card.

Memory is :func:`benchmarks.harness.peak_memory` (the CPU allocator's peak above what was live
before the step: activations, gradients, temporaries); times are medians of interleaved rounds,
every setting and depth of one T interleaved (one model per depth; the settings are attributes
it reads at every forward). Ratios are the setting's over no checkpointing. The step time's
line through two depths multiplies their noise by about 10 at depth 12: quote it from a quiet
machine, and the memory rows (independent of load) from any.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .harness import Row, Timing, interleaved, peak_memory, time_row
from .model import NUM_CLASSES, Geometry, build_ours, train_step

__all__ = ["SETTINGS", "FRAMES", "CARDS_GIB", "REAL_RUN_LIMIT_GIB", "Line", "run", "longest_clip"]

SECTION = "memory"
#: Name -> (grad_checkpointing, grad_checkpointing_every, grad_checkpointing_part).
SETTINGS: dict[str, tuple[bool, int, str]] = {
    "none": (False, 1, "block"),
    "every block": (True, 1, "block"),
    "every 2nd block": (True, 2, "block"),
    "attention only": (True, 1, "attention"),
}
FRAMES = (8, 16, 32)
CARDS_GIB = (24, 80)
DEPTH = 12
#: No real run here whose predicted peak is above this (the machine is shared).
REAL_RUN_LIMIT_GIB = 8.0
MIB = 2**20


def _geometry(depth: int, frames: int) -> Geometry:
    return Geometry(768, depth, 12, 16, 224, frames, 1)


def _period(setting: str) -> int:
    """Blocks after which the setting's pattern repeats: the depth step of its line."""
    on, every, _ = SETTINGS[setting]
    return every if on else 1


@dataclass(frozen=True)
class Line:
    """value(depth) = base + depth * per_block, through two measured depths."""

    base: float
    per_block: float

    @classmethod
    def through(cls, d1: int, v1: float, d2: int, v2: float) -> "Line":
        per_block = (v2 - v1) / (d2 - d1)
        return cls(v1 - d1 * per_block, per_block)

    def at(self, depth: int) -> float:
        return self.base + depth * self.per_block


@dataclass
class Measured:
    """One setting at one depth and T: median timing and peak bytes."""

    timing: Timing
    peak: float


def _measure(frames: int, settings: dict[int, list[str]], rounds: int) -> dict[int, dict[str, Measured]]:
    """``settings[depth]`` on one model of ``depth`` blocks each, at ``frames``: every (depth,
    setting) case interleaved with the others, so that the lines through two depths see the same
    load."""
    gen = torch.Generator().manual_seed(0)
    size = _geometry(1, frames).img_size
    video = torch.randn(1, 3, frames, size, size, generator=gen)
    target = torch.randint(0, NUM_CLASSES, (1,), generator=gen)

    def with_setting(model: torch.nn.Module, step: Callable[[], None], name: str) -> Callable[[], None]:
        def run() -> None:
            model.grad_checkpointing, model.grad_checkpointing_every, model.grad_checkpointing_part = SETTINGS[name]
            step()
        return run

    cases: dict[tuple[int, str], Callable[[], None]] = {}
    for depth, names in settings.items():
        torch.manual_seed(0)
        model = build_ours(_geometry(depth, frames), "dna")
        step = train_step(model, video, target)
        cases.update({(depth, name): with_setting(model, step, name) for name in names})
    timings = interleaved(cases, rounds=rounds, warmup=1)  # the warm-up creates the SGD momentum
    out: dict[int, dict[str, Measured]] = {depth: {} for depth in settings}
    for (depth, name), case in cases.items():
        out[depth][name] = Measured(timings[depth, name], float(peak_memory(case)))
    return out


def _static_bytes(depth: int) -> float:
    """Parameters and SGD momentum of a ``depth``-block DnA TimeSformer-B: what is live before
    a train step (linear in depth; counted without building the full model)."""
    counts = {}
    for d in (1, 2):
        counts[d] = sum(p.numel() for p in build_ours(_geometry(d, 8), "dna").parameters())
    return 2 * 4 * Line.through(1, counts[1], 2, counts[2]).at(depth)


def longest_clip(peak_by_frames: dict[int, float], static: float, card_gib: float) -> int:
    """Frames whose train step fits ``card_gib`` (bytes: ``static`` + the step's peak), by the line
    through the two longest clips (at batch 1 the memory grows linearly in T: attention within
    a frame and within a location's frames, both fused at these lengths)."""
    (t1, p1), (t2, p2) = sorted(peak_by_frames.items())[-2:]
    line = Line.through(t1, p1, t2, p2)
    return max(0, math.floor((card_gib * 2**30 - static - line.base) / line.per_block))


def run(rounds: int = 3, quick: bool = False, notes: list[str] | None = None) -> list[Row]:
    notes = notes if notes is not None else []
    rounds = 1 if quick else rounds
    names = list(SETTINGS)
    uniform = [n for n in names if _period(n) == 1]
    periodic = [n for n in names if _period(n) > 1]
    rows: list[Row] = []
    lines: dict[tuple[str, int], tuple[Line, Line, Line]] = {}  # (setting, T) -> peak, wall, cpu

    for frames in FRAMES:
        wanted: dict[int, list[str]] = {1: uniform, 2: list(names)}
        for name in periodic:
            wanted.setdefault(2 * _period(name), []).append(name)
        real = _measure(frames, wanted, rounds)
        for name in names:
            d1, d2 = _period(name), 2 * _period(name)
            a, b = real[d1][name], real[d2][name]
            lines[name, frames] = (Line.through(d1, a.peak, d2, b.peak),
                                   Line.through(d1, a.timing.wall, d2, b.timing.wall),
                                   Line.through(d1, a.timing.cpu, d2, b.timing.cpu))
        case = f"train step, {_geometry(2, frames).describe()}, DnA"
        at2 = real[2]
        for name in names[1:]:
            rows += [
                time_row(SECTION, case, "ms", f"ckpt {name}", at2[name].timing, "no ckpt", at2["none"].timing),
                Row(SECTION, case, "peak MiB", f"ckpt {name}", at2[name].peak / MIB, "no ckpt", at2["none"].peak / MIB),
            ]
        del real

    # Depth 12 by the lines.
    for frames in FRAMES:
        case = f"train step, depth {DEPTH} by extrapolation (depth 1, 2; every 2nd: 2, 4), {frames} frames"
        peak_none, wall_none, cpu_none = (line.at(DEPTH) for line in lines["none", frames])
        for name in names[1:]:
            peak, wall, cpu = (line.at(DEPTH) for line in lines[name, frames])
            goal = frames == 32 and name == "every block"
            rows += [
                Row(SECTION, case, "ms", f"ckpt {name}", wall * 1e3, "no ckpt", wall_none * 1e3,
                    cpu_ratio=cpu / cpu_none),
                Row(SECTION, case, "peak MiB", f"ckpt {name}", peak / MIB, "no ckpt", peak_none / MIB,
                    "<= 0.4 (issue 24)" if goal else "", (peak / peak_none <= 0.4) if goal else None),
            ]

    # One real depth-12 run at T = 8 beside its extrapolation.
    frames = FRAMES[0]
    limit = REAL_RUN_LIMIT_GIB * 2**30
    predicted = {name: lines[name, frames][0].at(DEPTH) for name in names}
    static = _static_bytes(DEPTH)
    checked = [n for n in names if static + predicted[n] <= limit]
    for name in sorted(set(names) - set(checked), key=names.index):
        notes.append(f"memory: depth {DEPTH}, {frames} frames, {name}: not run here (predicted "
                     f"{(static + predicted[name]) / 2**30:.1f} GiB with parameters and momentum, above "
                     f"{REAL_RUN_LIMIT_GIB:g} GiB); the extrapolation only")
    if checked:
        measured = _measure(frames, {DEPTH: checked}, max(1, min(rounds, 3)))[DEPTH]
        case = f"train step, depth {DEPTH}, {frames} frames: extrapolation vs a real run"
        for name in checked:
            wall = lines[name, frames][1].at(DEPTH)
            cpu = lines[name, frames][2].at(DEPTH)
            rows += [
                Row(SECTION, case, "peak MiB", f"{name}: extrapolated", predicted[name] / MIB,
                    f"{name}: measured", measured[name].peak / MIB),
                Row(SECTION, case, "ms", f"{name}: extrapolated", wall * 1e3, f"{name}: measured",
                    measured[name].timing.wall * 1e3, cpu_ratio=cpu / measured[name].timing.cpu),
            ]

    # The longest clip on a card, from the depth-12 lines.
    for card in CARDS_GIB:
        case = (f"longest clip that trains in {card} GiB, TimeSformer-B (12 blocks), batch 1, fp32, SGD momentum: "
                f"estimate from CPU memory")
        longest = {name: longest_clip({t: lines[name, t][0].at(DEPTH) for t in FRAMES}, static, card)
                   for name in names}
        rows += [Row(SECTION, case, "frames", f"ckpt {name}", longest[name], "no ckpt", longest["none"])
                 for name in names[1:]]
    notes.append(f"memory: depth-{DEPTH} rows and the longest clips are estimates from CPU memory (parameters and "
                 f"momentum {static / 2**30:.2f} GiB, plus the step's peak, linear in T through 16 and 32 frames); "
                 "a GPU adds its context and allocator slack, and its attention kernels keep other buffers: "
                 "python -m benchmarks.gpu measures the card")
    return rows
