"""Where the test suite's CPU goes: a pytest plugin that records, for every test, the CPU time
of the process running it and of the child processes it waited for, and each worker's
collection; then a report of the tests and files that cost the most.

    pytest -q -n 2 -p benchmarks.suite_cpu          # writes .cache/suite_cpu/<worker>.jsonl
    python -m benchmarks.suite_cpu [FOLDER] [--top N]

On 2 cores the suite is CPU-bound: its wall time is about the CPU of both workers over two, so
a test's CPU (not its ``--durations`` wall time, which grows when the other worker competes)
is what a cut saves. A child's CPU counts once the test has waited for it, with the CPU of
the children it waited for; a process nobody waits for (a ``multiprocessing`` fork server and
the runs it forks) is not counted, so a test that starts one shows a lower bound. Wall time
well above a test's CPU is waiting (a timeout, a sleep). Output folder: ``$SUITE_CPU_DIR`` or
``.cache/suite_cpu``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path

_FOLDER = Path(os.environ.get("SUITE_CPU_DIR", ".cache/suite_cpu"))
_log = None
_started: dict[str, tuple[float, float, float]] = {}  # a running test's CPU and time at its start


def _cpu() -> tuple[float, float]:
    """(this process, its waited-for children): user + system seconds."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _write(**record) -> None:
    _log.write(json.dumps(record) + "\n")
    _log.flush()


def pytest_configure(config) -> None:
    global _log
    _FOLDER.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:  # the run's first process (pytest-xdist's controller starts the workers later)
        for old in _FOLDER.glob("*.jsonl"):
            old.unlink()
        if getattr(config.option, "dist", "no") != "no":
            return  # the controller runs no test: it only hears the workers' reports
    _log = open(_FOLDER / f"{worker or 'main'}.jsonl", "w")
    _write(event="start", cpu=_cpu(), time=time.time())


def pytest_collection_finish(session) -> None:
    if _log is not None:
        _write(event="collected", cpu=_cpu(), time=time.time())


def pytest_runtest_logstart(nodeid, location) -> None:
    if _log is not None:
        _started[nodeid] = (*_cpu(), time.time())


def pytest_runtest_logfinish(nodeid, location) -> None:
    if _log is not None and nodeid in _started:
        own, children, started = _started.pop(nodeid)
        own_after, children_after = _cpu()
        _write(event="test", id=nodeid, own=own_after - own, children=children_after - children,
               wall=time.time() - started)


def pytest_unconfigure(config) -> None:
    if _log is not None and not _log.closed:
        _write(event="end", cpu=_cpu(), time=time.time())
        _log.close()


def report(folder: Path, top: int) -> str:
    """The workers' collection and totals, the files and the tests of most CPU."""
    lines, tests = [], []
    for path in sorted(folder.glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        events = {r["event"]: r for r in records if r["event"] != "test"}
        tests += [r for r in records if r["event"] == "test"]
        start, collected, end = events.get("start"), events.get("collected"), events.get("end")
        if start and collected and end:
            lines.append(f"{path.stem}: collection {collected['cpu'][0] - start['cpu'][0]:.1f} s CPU; "
                         f"in all {sum(end['cpu']):.1f} s CPU (children {end['cpu'][1]:.1f}) "
                         f"over {end['time'] - start['time']:.1f} s")
    cpu = {t["id"]: t["own"] + t["children"] for t in tests}
    lines.append(f"{len(tests)} tests, {sum(cpu.values()):.1f} s CPU")
    by_file: dict[str, float] = defaultdict(float)
    for test_id, seconds in cpu.items():
        by_file[test_id.split("::")[0]] += seconds
    lines += ["", "CPU s  file"] + [f"{s:5.1f}  {f}" for f, s in sorted(by_file.items(), key=lambda x: -x[1])[:top]]
    lines += ["", "  CPU s (own + children)  wall s  test"]
    for t in sorted(tests, key=lambda t: -cpu[t["id"]])[:top]:
        lines.append(f"{cpu[t['id']]:7.1f} ({t['own']:5.1f} + {t['children']:5.1f})  {t['wall']:6.1f}  {t['id']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m benchmarks.suite_cpu")
    parser.add_argument("folder", nargs="?", type=Path, default=_FOLDER, help="where the plugin wrote its records")
    parser.add_argument("--top", type=int, default=25, help="files and tests listed")
    args = parser.parse_args(argv)
    if not any(args.folder.glob("*.jsonl")):
        parser.error(f"{args.folder}: no records; run pytest -p benchmarks.suite_cpu first")
    print(report(args.folder, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
