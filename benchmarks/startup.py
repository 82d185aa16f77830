"""Section: what a user waits for before a command does its work (start-up), and where it goes.

Each case is a fresh ``python`` process, as a user starts it, timed by the wall clock from
``exec`` to exit (its CPU time too: the children's ``ru_utime + ru_stime``):

* ``predict CKPT one.mp4``: one video from a quickstart-sized checkpoint (tiny arch, 8 frames,
  3 crops of 64, 5 classes), the whole command: imports, loading the checkpoint, decoding,
  the network, the table;
* ``predict --help`` and ``cli.py fit --help``: the two helps a new user reads first.

Two checkouts are measured in the same interleaved rounds (:func:`~.harness.interleaved`):
this one and ``--startup-baseline DIR`` (another checkout, e.g. ``git worktree add
/tmp/base 2f22479``); each process runs with ``PYTHONPATH`` set to its checkout, from an empty
folder, so each imports its own ``dna_video``. Without a baseline the rows compare this
checkout with itself (ratio 1) and still report the absolute times against the target
(``predict CKPT one.mp4`` <= 5 s).

The checkpoint is written once per cache by a two-step ``fit`` of the quickstart config (1
epoch, 2 training batches) with the BASELINE's code when one is given: a checkpoint of the
older version is what a user upgrading has, and the newer code must read it.

Where the time goes: one ``python -X importtime`` run of ``predict CKPT one.mp4`` per checkout;
the notes list the import time spent in the modules of each heavy package it loads (torch,
torchvision, timm, Lightning, matplotlib, decord, PyAV, ONNX Runtime, the package itself; each
module counted once, in its own package), the rest, and the total.

    python -m benchmarks --sections startup --startup-baseline /tmp/base
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .harness import Row, Timing, interleaved

__all__ = ["run", "HEAVY"]

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 5.0
#: Packages whose cumulative import time the notes report (top-level names).
HEAVY = ("torch", "torchvision", "timm", "lightning", "matplotlib", "decord", "av", "onnxruntime", "dna_video")


def _env(checkout: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(checkout)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def _command(checkout: Path, args: list[str], cwd: Path) -> Callable[[], float]:
    """A callable running ``args`` (after ``python``) under ``checkout``; it returns the
    child's CPU seconds and raises when the command fails."""

    def call() -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, *args], cwd=cwd, env=_env(checkout), capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} under {checkout} exited {done.returncode}: {done.stderr[-800:]}")
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    return call


def quickstart_checkpoint(checkout: Path, cache: Path) -> tuple[Path, Path]:
    """(checkpoint, one test video) of a two-step quickstart fit by ``checkout``'s code, made
    once per cache folder (the synthetic videos are the quickstart's own, rendered on first use)."""
    folder = cache / "startup"
    found = sorted(folder.glob("runs/quickstart/version_*/checkpoints/last.ckpt"))
    videos = sorted((folder / "synthetic").glob("*.mp4"))
    if found and videos:
        return found[-1], videos[0]
    folder.mkdir(parents=True, exist_ok=True)
    args = ["-m", "dna_video", "fit", "--config", "quickstart", "--trainer.max_epochs", "1",
            "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
            "--trainer.logger.init_args.save_dir", str(folder / "runs"), "--data.init_args.root", str(folder / "synthetic")]
    _command(checkout, args, folder)()
    return quickstart_checkpoint(checkout, cache)


def import_breakdown(checkout: Path, args: list[str], cwd: Path) -> dict[str, float]:
    """Seconds of import time per top-level package (the ``self`` column of ``-X importtime``
    summed over the package's modules, so nothing is counted twice): the packages of
    :data:`HEAVY`, then ``other`` for the rest, then ``total``."""
    done = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=cwd, env=_env(checkout),
                          capture_output=True, text=True)
    seconds = dict.fromkeys((*HEAVY, "other"), 0.0)
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)$", line)
        if match:
            package = match.group(2).split(".")[0]
            seconds[package if package in HEAVY else "other"] += int(match.group(1)) / 1e6
    found = {name: value for name, value in seconds.items() if value >= 0.005}
    found["total"] = sum(seconds.values())
    return found


def _timed(call: Callable[[], float], cpu: list[float]) -> Callable[[], None]:
    return lambda: cpu.append(call())


def run(cache: str, rounds: int = 5, quick: bool = False, baseline: str | None = None,
        notes: list[str] | None = None) -> list[Row]:
    notes = notes if notes is not None else []
    ours_root = ROOT
    base_root = Path(baseline).resolve() if baseline else ROOT
    checkpoint, video = quickstart_checkpoint(base_root, Path(cache).resolve())
    cases = {
        "predict CKPT one.mp4": (["-m", "dna_video", "predict", str(checkpoint), str(video)], TARGET_S),
        "predict --help": (["-m", "dna_video", "predict", "--help"], None),
        "cli.py fit --help": ([None, "fit", "--help"], None),  # None: the checkout's cli.py
    }
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="dna_video_startup_") as scratch:
        cwd = Path(scratch)
        for case, (args, target) in cases.items():
            calls, cpu = {}, {"ours": [], "baseline": []}
            for side, root in (("ours", ours_root), ("baseline", base_root)):
                full = [str(root / "cli.py") if a is None else a for a in args]
                calls[side] = _timed(_command(root, full, cwd), cpu[side])
            timing = interleaved(calls, rounds=2 if quick else rounds, warmup=1)
            # The children's CPU time, median over the timed calls (the warm-up's first).
            cpu_median = {side: sorted(values[1:])[len(values[1:]) // 2] for side, values in cpu.items()}
            ours_t = Timing(timing["ours"].wall, cpu_median["ours"])
            base_t = Timing(timing["baseline"].wall, cpu_median["baseline"])
            label = f"under {target:g} s" if target else ""
            rows.append(Row("startup", case, "s", f"this checkout ({_head(ours_root)})", ours_t.wall,
                            f"baseline ({_head(base_root)})", base_t.wall, label,
                            None if target is None else ours_t.wall <= target, cpu_ratio=ours_t.cpu / base_t.cpu))
        for side, root in (("this checkout", ours_root), ("baseline", base_root)) if baseline else (("this checkout", ours_root),):
            seconds = import_breakdown(root, cases["predict CKPT one.mp4"][0], cwd)
            shown = ", ".join(f"{name} {value:.2f} s" for name, value in seconds.items())
            notes.append(f"startup, import time of `predict CKPT one.mp4` by package ({side}, one run): {shown}")
    return rows


def _head(root: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return root.name


if __name__ == "__main__":
    start = time.perf_counter()
    found = run(os.environ.get("DNA_BENCH_CACHE", ".cache/benchmarks"), baseline=sys.argv[1] if len(sys.argv) > 1 else None)
    for row in found:
        print(row)
    print(f"{time.perf_counter() - start:.0f} s")
