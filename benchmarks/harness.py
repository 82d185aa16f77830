"""Measurement tools shared by the benchmark sections: interleaved timing with medians,
peak tensor memory on CPU, the machine description, and the result table.

Timing: every case of a comparison runs once per round, in an order rotated each round, and
the reported figure is the median over rounds. On a shared machine the load changes from
second to second; interleaving spreads it over all cases alike, so the RATIO of medians is
meaningful even when absolute times are not. Each call is timed both by the wall clock and
by the process's CPU time (see :class:`Timing`).

Memory: :func:`peak_memory` runs a callable under ``torch.profiler`` with
``profile_memory=True`` and replays the allocator's allocation and free events in time
order: the peak of live tensor bytes above what was live at the start. This is what
``torch.cuda.max_memory_allocated() - memory_allocated()`` measures on a GPU, here for the
CPU allocator: deterministic (no dependence on malloc caching or page reuse, unlike RSS) and
counting every tensor torch allocates, including kernel workspaces and saved activations.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "Row", "Timing", "interleaved", "time_row", "rate_row", "peak_memory", "machine_description", "markdown_table",
]


@dataclass(frozen=True)
class Timing:
    """Median seconds per call: wall clock, and CPU time of this process (all its threads).

    CPU time leaves out the time the process waited for a core, so on a shared machine its
    ratios are steadier; wall time is what a user waits for. Both come from the same calls."""

    wall: float
    cpu: float


def interleaved(cases: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, Timing]:
    """Median time per call of each case, the cases interleaved round by round.

    Each case first runs ``warmup`` times (not timed: first-call allocations, lazy inits).
    Round r runs the cases starting from the r-th, so none is always first or last.
    """
    names = list(cases)
    for name in names:
        for _ in range(warmup):
            cases[name]()
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start, start_cpu = time.perf_counter(), time.process_time()
            cases[name]()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {name: Timing(statistics.median(wall[name]), statistics.median(cpu[name])) for name in names}


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes of CPU tensor memory allocated by ``fn`` above what was live when it
    started (see the module docstring). The result of ``fn`` is dropped inside the window,
    so only memory needed DURING the call counts, not what it returns.

    Frees of tensors that were live before the call count too (as negative): free such
    tensors (e.g. old gradients) BEFORE the call, or the peak comes out lower by their size.
    """
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def code_description() -> str:
    """The measured code: the commit of this checkout and whether it has uncommitted changes."""
    try:
        from experiments.reproducible import tree_state

        state = tree_state(Path(__file__).resolve().parent)
    except Exception as exc:  # noqa: BLE001 - not a git checkout: say so rather than fail the run
        return f"commit unknown ({type(exc).__name__})"
    changed = f"{len(state.changes)} uncommitted changes: {', '.join(state.changes[:3])}" if state.dirty else "clean tree"
    return f"commit {state.commit[:12]} ({changed})"


def machine_description() -> str:
    """One line: CPU model, cores and threads, memory, ISA, library versions, load."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        mem = f"{mem_gb:.0f} GiB RAM"
    except (ValueError, OSError):
        mem = "RAM unknown"
    import lightning
    import torchvision

    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{model}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()} "
        f"(OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}), {mem}, "
        f"ISA {torch.backends.cpu.get_cpu_capability()}; Python {platform.python_version()}, "
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, lightning {lightning.__version__}; "
        f"load average (1/5/15 min) {load}"
    )


@dataclass
class Row:
    """One comparison: ours against a baseline, both measured in the same run.

    ``ratio`` is always ours / baseline of the figure shown: below 1 is better for a cost
    (time, memory), above 1 for a rate (clips/s). ``target`` states the bound."""

    section: str
    case: str
    metric: str
    ours: str
    ours_value: float
    baseline: str
    baseline_value: float
    target: str = ""
    met: bool | None = None
    cpu_ratio: float | None = None

    @property
    def ratio(self) -> float:
        return self.ours_value / self.baseline_value if self.baseline_value else float("nan")


def time_row(
    section: str, case: str, metric: str, ours: str, ours_t: Timing, baseline: str, base_t: Timing,
    target: str = "", limit: float | None = None,
) -> Row:
    """A row of milliseconds; ``limit``: the target holds when ours / baseline <= limit."""
    ratio = ours_t.wall / base_t.wall
    return Row(section, case, metric, ours, ours_t.wall * 1e3, baseline, base_t.wall * 1e3, target,
               None if limit is None else ratio <= limit, cpu_ratio=ours_t.cpu / base_t.cpu)


def rate_row(
    section: str, case: str, per_call: float, ours: str, ours_t: Timing, baseline: str, base_t: Timing,
    target: str = "", limit: float | None = None,
) -> Row:
    """A row of items per second (``per_call`` items each call); ``limit``: the target holds
    when ours / baseline >= limit."""
    ratio = base_t.wall / ours_t.wall
    return Row(section, case, "clips/s", ours, per_call / ours_t.wall, baseline, per_call / base_t.wall, target,
               None if limit is None else ratio >= limit, cpu_ratio=base_t.cpu / ours_t.cpu)


def _fmt(value: float, metric: str) -> str:
    if metric == "M params":
        return f"{value:.2f}"
    if "MiB" in metric:
        return f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def markdown_table(rows: list[Row]) -> str:
    lines = [
        "| section | case | metric | ours | value | baseline | value | ratio | CPU-time ratio | target |",
        "|---|---|---|---|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        mark = "" if r.met is None else (" (met)" if r.met else " (MISSED)")
        lines.append(
            f"| {r.section} | {r.case} | {r.metric} | {r.ours} | {_fmt(r.ours_value, r.metric)} | "
            f"{r.baseline} | {_fmt(r.baseline_value, r.metric)} | {r.ratio:.2f} | "
            f"{'' if r.cpu_ratio is None else f'{r.cpu_ratio:.2f}'} | {r.target}{mark} |"
        )
    return "\n".join(lines)
