"""Prepare a dataset copy for training: scan it, report per protocol, validate, transcode.

    dna-video prepare toyota_smarthome /data/Smarthome/mp4 --validate
    dna-video prepare ntu60 /data/nturgb+d_rgb --transcode /data/ntu60_256 --short-side 256
    dna-video prepare videos /data/my_videos --validate

* Scan: every file under the root sorted by the same code the DataModules use; a table per
  protocol of the videos per split against the full dataset's counts, the classes present
  and the files left out by reason.
* ``--validate``: every video is opened with decord (what training uses), a few frames are
  decoded, and all its frames are decoded in order with PyAV: a file is ``ok``, ``short``
  (reports more frames than decode: training samples within the decodable ones) or
  ``unreadable`` (training replaces it). With ``--transcode`` the outputs are validated.
* ``--transcode OUT``: every video is re-encoded to H.264 mp4 under OUT (same relative
  path and name, ``.mp4``): short side ``--short-side``, a keyframe every ``--gop`` frames
  and no B-frames, so a clip's seek decodes at most a GOP instead of up to a whole file of
  1080p frames. Files run in parallel (``--workers``); finished files are skipped, so an
  interrupted run resumes (each file is written under a temporary name and renamed when
  complete).
* Every file is handled in a process of its own (``--workers`` at a time): a file that
  hangs the decoder past ``--timeout`` seconds, or crashes it, is killed and reported as
  ``unreadable`` (or a failed transcode) by name, and the run goes on.

The exit status is 1 when a video is unreadable or a transcode failed, else 0; ``--report
FILE`` writes every file's outcome as JSON.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable

import numpy as np

from dna_video.common.atomic import write_json
from dna_video.common.videofiles import is_video_name
from dna_video.data.records import sort_paths

log = logging.getLogger(__name__)

__all__ = ["main", "scan", "validate_file", "transcode_file", "output_path"]

DATASETS = ("toyota_smarthome", "ntu60", "videos")


def _catalogs(dataset: str, root: str, exclude_file: str | None = None) -> dict:
    """protocol -> (Protocol, Catalog): the root listed once and sorted by each protocol with
    the code the DataModules run (their ``make_catalog``, at their defaults), from the
    datasets' Lightning-free layout modules: the scan imports neither torch nor Lightning."""
    if dataset == "toyota_smarthome":
        from dna_video.data import smarthome_layout as layout

        files, folder = layout.list_smarthome_files(root)

        def make(protocol):
            return layout.smarthome_catalog(files, protocol)
    elif dataset == "ntu60":
        from dna_video.data import ntu_layout as layout

        files, folder = layout.list_ntu_files(root)
        exclude = layout.read_sample_list(exclude_file) if exclude_file else set()

        def make(protocol):
            return layout.ntu_catalog(files, protocol, exclude)
    else:
        return {}
    catalogs = {}
    for name, protocol in layout.PROTOCOLS.items():
        catalog = make(protocol)
        catalog.log_summary(folder)
        catalogs[name] = (protocol, catalog)
    return catalogs


def scan(dataset: str, root: str, exclude_file: str | None = None) -> tuple[list[Path], dict[str, dict]]:
    """(video files to process, protocol -> report).

    A report holds per split ``videos``, ``expected`` (full dataset), ``classes`` present
    and ``num_classes``, and ``excluded`` (reason -> count) over the whole root.
    """
    reports: dict[str, dict] = {}
    files: set[str] = set()
    for name, (protocol, catalog) in _catalogs(dataset, root, exclude_file).items():
        splits = {}
        records = catalog.records
        for split in ("train", "val", "test"):
            table = records.get(split)
            splits[split] = {
                "videos": 0 if table is None else len(table),
                "expected": protocol.expected_videos.get(split),
                "classes": 0 if table is None else len(np.unique(table.labels)),
                "num_classes": len(protocol.classes),
                # NTU without a carved-out validation split validates on the test split.
                "same_as_test": split == "val" and split not in protocol.splits,
            }
        reports[name] = {"description": protocol.description, "splits": splits,
                         "excluded": catalog.excluded_counts()}
        # Every well-named video is part of the dataset copy, also those a protocol leaves out.
        for table in records.values():
            files.update(table.paths)
        for reason, paths in catalog.excluded_by_reason().items():
            if reason not in catalog.foreign_reasons:
                files.update(paths)
    if dataset == "videos":
        files = {str(p) for p in Path(root).rglob("*") if is_video_name(p) and p.is_file()}
    return [Path(f) for f in sort_paths(files)], reports


def validate_file(path: str) -> dict:
    """Open with decord, decode its first, middle and last frame as training would, then
    decode every frame in order with PyAV. Returns {path, status, reported, decodable,
    error}; status ``ok``, ``short`` (decord or the container header report more frames
    than decode: a damaged or truncated file, which training samples within the decodable
    frames) or ``unreadable`` (training replaces it)."""
    from dna_video.data.video import VideoDecodeError, count_decodable_frames, declared_frames, read_frames

    out = {"path": path, "status": "ok", "reported": 0, "decodable": 0, "error": ""}
    try:
        decoded = read_frames(path, lambda n, fps: np.array([0, n // 2, n - 1]))
    except VideoDecodeError as exc:
        return {**out, "status": "unreadable", "error": str(exc)}
    out["reported"] = reported = max(decoded.reported, declared_frames(path))
    # When decord failed, read_frames has already counted the decodable frames with PyAV.
    decodable = decoded.num_frames if decoded.decoded_by_pyav else count_decodable_frames(path)
    out["decodable"] = decodable
    if decodable == 0:
        return {**out, "status": "unreadable", "error": "no frame decodes"}
    if decodable < reported:
        out.update(status="short", error=f"reports {reported} frames, {decodable} decode")
    return out


def output_path(src: Path, root: Path, out_root: Path) -> Path:
    """Where the transcoded copy of ``src`` goes: same relative folder and name, ``.mp4``."""
    return (out_root / src.relative_to(root)).with_suffix(".mp4")


def transcode_file(src: str, dst: str, short_side: int | None, gop: int, crf: int, preset: str) -> dict:
    """Transcode one file unless ``dst`` exists. Returns {path, output, status (done,
    skipped, damaged, failed), frames, error}."""
    from dna_video.data.video import VideoDecodeError, transcode_video

    out = {"path": src, "output": dst, "status": "done", "frames": 0, "error": ""}
    if os.path.exists(dst):
        return {**out, "status": "skipped"}
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    partial = dst + ".partial"
    try:
        frames, damaged = transcode_video(src, partial, short_side, gop, crf, preset)
    except (VideoDecodeError, OSError) as exc:
        if os.path.exists(partial):
            os.remove(partial)
        return {**out, "status": "failed", "error": str(exc)}
    os.replace(partial, dst)  # atomic: a file under its final name is complete
    return {**out, "frames": frames, "status": "damaged" if damaged else "done",
            "error": "source damaged: kept the frames before the damage" if damaged else ""}


def _child(fn: Callable[..., dict], job: tuple, conn) -> None:
    conn.send(fn(*job))
    conn.close()


def _validate_failure(job: tuple, error: str) -> dict:
    return {"path": job[0], "status": "unreadable", "reported": 0, "decodable": 0, "error": error}


def _transcode_failure(job: tuple, error: str) -> dict:
    partial = job[1] + ".partial"
    if os.path.exists(partial):
        os.remove(partial)
    return {"path": job[0], "output": job[1], "status": "failed", "frames": 0, "error": error}


def _run_parallel(
    fn: Callable[..., dict], jobs: list[tuple], workers: int, description: str, timeout: float,
    failure: Callable[[tuple, str], dict],
) -> list[dict]:
    """``fn(*job)`` for every job, each in a process of its own, at most ``workers`` at once.

    Why a process per file rather than a pool: some files hang the decoder inside C code
    (nothing in Python can interrupt it) or crash it; a pool would stall or break on them.
    A job still running after ``timeout`` seconds is killed, and a process that dies
    without an answer is reported too, as ``failure(job, why)``, naming the file.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    results: list[dict] = []
    pending = list(jobs)
    running: dict = {}  # connection -> (process, job, start time)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(description, total=len(jobs))

        def finish(conn, result: dict) -> None:
            process, _, _ = running.pop(conn)
            process.join()
            conn.close()
            results.append(result)
            progress.advance(task)

        while pending or running:
            while pending and len(running) < max(1, workers):
                job = pending.pop(0)
                receive, send = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_child, args=(fn, job, send), daemon=True)
                process.start()
                send.close()  # the child holds the sending end: EOF when it dies
                running[receive] = (process, job, time.monotonic())
            for conn in wait(list(running), timeout=0.2):
                process, job, _ = running[conn]
                try:
                    result = conn.recv()
                except EOFError:
                    process.join()
                    result = failure(job, f"the decoder crashed (process exit code {process.exitcode})")
                finish(conn, result)
            now = time.monotonic()
            for conn, (process, job, started) in list(running.items()):
                if now - started > timeout:
                    process.kill()
                    finish(conn, failure(job, f"still decoding after {timeout:g} s (the decoder hangs on it): killed"))
    return sorted(results, key=lambda r: r["path"])


def _print_reports(reports: dict[str, dict], root: str, console) -> None:
    from rich.table import Table

    for name, report in reports.items():
        table = Table(title=f"{root} — protocol {name}: {report['description']}")
        for column in ("split", "videos", "full dataset", "classes present"):
            table.add_column(column, justify="left" if column == "split" else "right")
        for split, s in report["splits"].items():
            if s.get("same_as_test"):
                table.add_row(split, "= test", "", "")
                continue
            expected = "" if s["expected"] is None else str(s["expected"])
            table.add_row(split, str(s["videos"]), expected, f"{s['classes']}/{s['num_classes']}")
        console.print(table)
        for reason, count in report["excluded"].items():
            console.print(f"  left out: {count} ({reason})")


def _summary(results: list[dict], key: str = "status") -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r[key]] = counts.get(r[key], 0) + 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dna-video prepare",
        description="Scan a dataset copy, report per protocol, validate every video, transcode to H.264 mp4.",
    )
    parser.add_argument("dataset", choices=DATASETS, help="the dataset's layout (videos: any video files)")
    parser.add_argument("root", help="the dataset's video folder")
    parser.add_argument("--validate", action="store_true", help="decode every video (the outputs with --transcode)")
    parser.add_argument("--transcode", metavar="OUT", help="write H.264 mp4 copies under OUT (resumable)")
    parser.add_argument("--short-side", type=int, default=256, help="short side of the copies, 0 keeps the size")
    parser.add_argument("--gop", type=int, default=16, help="keyframe interval of the copies (frames)")
    parser.add_argument("--crf", type=int, default=23, help="x264 quality of the copies (lower is better)")
    parser.add_argument("--preset", default="veryfast", help="x264 preset of the copies")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel processes")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one file may take before it is killed and reported (hanging decoders)")
    parser.add_argument("--exclude-file", help="NTU: sample names to leave out (e.g. missing skeletons)")
    parser.add_argument("--report", help="write every file's outcome to this JSON file")
    args = parser.parse_args(argv)

    from rich.console import Console

    console = Console()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    root = Path(args.root)
    if not root.is_dir():
        parser.error(f"{root} is not a folder")
    files, reports = scan(args.dataset, str(root), args.exclude_file)
    _print_reports(reports, str(root), console)
    console.print(f"{len(files)} video files to process under {root}")
    report: dict = {"root": str(root), "protocols": reports, "files": len(files)}
    failed = 0
    start = time.perf_counter()

    to_validate = [str(f) for f in files]
    if args.transcode:
        out_root = Path(args.transcode)
        if out_root.resolve() == root.resolve():
            parser.error("--transcode needs another folder than the root")
        jobs = [(str(f), str(output_path(f, root, out_root)), args.short_side or None, args.gop, args.crf,
                 args.preset) for f in files]
        results = _run_parallel(transcode_file, jobs, args.workers, "transcoding", args.timeout, _transcode_failure)
        counts = _summary(results)
        console.print(f"transcoded to {out_root}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
        for r in results:
            if r["status"] in ("failed", "damaged"):
                console.print(f"  {r['status']}: {r['path']}: {r['error']}")
        failed += counts.get("failed", 0)
        report["transcode"] = results
        to_validate = [r["output"] for r in results if r["status"] != "failed"]
        _, out_reports = scan(args.dataset, str(out_root), args.exclude_file)
        _print_reports(out_reports, str(out_root), console)
        report["output_protocols"] = out_reports

    if args.validate:
        results = _run_parallel(validate_file, [(f,) for f in to_validate], args.workers, "validating", args.timeout,
                                _validate_failure)
        counts = _summary(results)
        console.print("validated: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
        for r in results:
            if r["status"] != "ok":
                console.print(f"  {r['status']}: {r['path']}: {r['error']}")
        failed += counts.get("unreadable", 0)
        report["validate"] = results

    console.print(f"done in {time.perf_counter() - start:.1f} s")
    if args.report:
        write_json(args.report, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
