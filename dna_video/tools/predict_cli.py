"""The command line of ``dna-video predict``, shared by its two runtimes (PyTorch:
:mod:`.predict`; ONNX Runtime for an ``.onnx`` model: :mod:`.predict_onnx`) and free of torch:
the options and their checks, the videos the paths name (files, folders, list files), and what
the command prints and writes (the table, ``--out`` CSV or JSON, the timelines, the lines
counting failed videos).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dna_video.analysis.predictions import csv_rows, prediction_records, prediction_table, write_csv
from dna_video.analysis.windows import Timeline, describe, parse_stride, write_timeline
from dna_video.common.atomic import write_text
from dna_video.data.decoders import DECODERS
from dna_video.data.sampling import short_videos_note
from dna_video.data.video import VideoDecodeError, VideoTooSmallError

log = logging.getLogger(__name__)

__all__ = [
    "VIDEO_SUFFIXES", "LIST_SUFFIXES", "collect_videos", "add_settings_arguments", "settings_overrides", "parser",
    "check_arguments", "write_predictions", "failure_summary", "write_timelines",
]

VIDEO_SUFFIXES = {".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv"}
LIST_SUFFIXES = {".txt", ".csv", ".lst", ".list"}


def _list_file(path: Path, root: Path | None) -> list[tuple[str, int | None]]:
    base = root or path.parent
    videos = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        name, label = text, None
        parts = text.rsplit(",", 1) if "," in text else text.rsplit(None, 1)
        if len(parts) == 2 and parts[1].strip().lstrip("-").isdigit():
            name, label = parts[0].strip(), int(parts[1])
        full = Path(name) if Path(name).is_absolute() else base / name
        videos.append((str(full), label))
    if not videos:
        raise ValueError(f"list file {path} names no video")
    return videos


def collect_videos(paths: Sequence[str], root: str | None = None) -> list[tuple[str, int | None]]:
    """(video path, label or None) for every file, folder (recursively: files with a video
    suffix, sorted) and list file of ``paths``, in the order given.

    Raises:
        FileNotFoundError: a path that does not exist (named).
    """
    videos: list[tuple[str, int | None]] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES)
            if not found:
                log.warning("no video files (%s) under %s", ", ".join(sorted(VIDEO_SUFFIXES)), path)
            videos += [(str(p), None) for p in found]
        elif path.is_file() and path.suffix.lower() in LIST_SUFFIXES:
            videos += _list_file(path, Path(root) if root else None)
        elif path.is_file():
            videos.append((str(path), None))
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return videos


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Options overriding the checkpoint's evaluation data settings."""
    group = parser.add_argument_group("data settings (default: as the checkpoint's evaluation)")
    group.add_argument("--num-frames", type=int, help="frames per clip")
    group.add_argument("--sampling-rate", type=int, help="interval between sampled frames, at --target-fps")
    group.add_argument("--target-fps", type=float, help="frame rate the sampling rate refers to")
    group.add_argument("--sampling", choices=["clip", "uniform"], help="clip: frames sampling-rate apart; uniform: T segments")
    group.add_argument("--crop-size", type=int, help="square input side")
    group.add_argument("--mean", type=float, nargs=3, help="per-channel normalisation mean")
    group.add_argument("--std", type=float, nargs=3, help="per-channel normalisation std")
    group.add_argument("--clips", type=int, help="temporal views per video")
    group.add_argument("--crops", type=int, choices=[1, 3], help="spatial views per video")
    group.add_argument("--decoder", choices=list(DECODERS),
                       help="what decodes the videos (default: as in training; decord falls back to PyAV where it "
                            "does not import)")
    group.add_argument("--num-heads", type=int, help="head count, for a checkpoint of another layout that does not state it")


def settings_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The data settings given on the command line, by :class:`~dna_video.data.eval_settings.EvalSettings`
    field name (None: not given)."""
    return {
        "num_frames": args.num_frames, "sampling_rate": args.sampling_rate, "target_fps": args.target_fps,
        "sampling": args.sampling, "crop_size": args.crop_size,
        "mean": tuple(args.mean) if args.mean else None, "std": tuple(args.std) if args.std else None,
        "num_clips": args.clips, "num_crops": args.crops, "decoder": args.decoder,
    }


def _positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (argparse turns the ValueError into one usage line)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    """The options of ``dna-video predict``, for a checkpoint and for an ``.onnx`` model alike."""
    command = argparse.ArgumentParser(
        prog="dna-video predict",
        description="Top-k class predictions of a checkpoint for video files, folders or list files.",
    )
    command.add_argument("checkpoint", help="this project's .ckpt (or any checkpoint the importer reads), or a model.onnx "
                                           "of 'dna-video export onnx' (run by ONNX Runtime, without PyTorch)")
    command.add_argument("paths", nargs="+", help="video files, folders (searched recursively) or list files (.txt/.csv/.lst)")
    command.add_argument("--root", help="folder the relative paths of list files start from (default: the list file's)")
    command.add_argument("--out", help="write the predictions to FILE.csv or FILE.json (with --timeline: a folder)")
    command.add_argument("--features", help="write each video's pre-head embedding with its path to FILE.npy or FILE.pt")
    command.add_argument("--top-k", type=_positive_int, default=5, help="classes listed per video (default 5)")
    command.add_argument("--device", help="cpu, cuda, cuda:1... (default: cuda when available)")
    command.add_argument("--num-workers", type=int, default=0, help="decoding processes (default 0: in this process)")
    timeline = command.add_argument_group("long videos")
    timeline.add_argument("--timeline", action="store_true",
                          help="slide the clip window along each video: per-window CSV, segments as JSON and SRT, a "
                               "timeline PNG, in --out DIR (default: the checkpoint's run's predict/, else ./predict)")
    timeline.add_argument("--stride", help="between window starts: seconds (2.5, 2.5s) or frames of the file (16f); "
                                           "default half the window")
    timeline.add_argument("--smooth", type=_positive_int, default=1,
                          help="average each window's probabilities over K neighbouring windows (default 1: none)")
    timeline.add_argument("--min-segment", type=float, default=0.0,
                          help="merge segments shorter than this many seconds into a neighbour (default 0)")
    add_settings_arguments(command)
    return command


def check_arguments(args: argparse.Namespace) -> None:
    """The option mistakes :func:`parser` cannot catch, each stopped in one line (SystemExit)."""
    if args.timeline and args.features:
        raise SystemExit("error: --features is per video: leave it out with --timeline")
    if args.timeline and args.out and (Path(args.out).suffix in (".csv", ".json") or Path(args.out).is_file()):
        raise SystemExit(f"--out {args.out}: with --timeline, give a folder (the files are named after each video)")
    if not args.timeline and (args.stride or args.smooth != 1 or args.min_segment):
        raise SystemExit("error: --stride, --smooth and --min-segment shape a timeline: add --timeline")
    if args.timeline and args.stride:
        try:
            parse_stride(args.stride)
        except ValueError as exc:
            raise SystemExit(f"error: --{exc}") from None
    if args.out and not args.timeline and Path(args.out).suffix not in (".csv", ".json"):
        raise SystemExit(f"--out {args.out}: use a .csv or .json file")
    if args.features and Path(args.features).suffix not in (".npy", ".pt"):
        raise SystemExit(f"--features {args.features}: use a .npy or .pt file")


def write_predictions(args: argparse.Namespace, paths: Sequence[str], probs: np.ndarray,
                      labels: Sequence[int | None], frames: Sequence[tuple[int, int]], class_names: Sequence[str],
                      header: dict[str, Any], failed: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The table of the videos ``paths`` with (N, K) ``probs`` on the console, and ``--out``:
    CSV rows (:func:`~dna_video.analysis.predictions.csv_rows`) or JSON (``header``, e.g. the
    checkpoint and settings, then ``class_names``, ``predictions`` and the ``failed`` videos);
    with no video read, an earlier ``--out`` stays as it was. Returns the records."""
    probs = np.asarray(probs, dtype=np.float32)
    records = prediction_records(paths, probs, labels, class_names, args.top_k, frames) if len(paths) else []
    if records:
        print(prediction_table(records))
    if not records and (args.out or args.features):
        print(f"no video could be read: {args.out or args.features} not written", file=sys.stderr)
    elif args.out:
        if args.out.endswith(".json"):
            write_text(args.out, json.dumps({
                **header, "class_names": list(class_names), "predictions": records,
                "failed": [{"path": p, "error": e} for p, e in failed],
            }, indent=1, default=list))
        else:
            write_csv(args.out, csv_rows(paths, probs, labels, class_names=class_names, top_k=args.top_k))
        print(f"wrote {len(records)} predictions to {args.out}")
    return records


def failure_summary(total: int, failed: Sequence[tuple[str, str]], refused: Sequence[tuple[str, str]],
                    min_side: int, short: Sequence[tuple[str, int, int]]) -> None:
    """On stderr: how many of ``total`` videos could not be read or were refused (each was named
    in its own line already), and the videos shorter than the clip."""
    counts = [f"{len(failed)} of {total} videos could not be read"] if failed else []
    if refused:
        counts.append(f"{len(refused)} of {total} refused as too small for the model (a side under {min_side} pixels)")
    if counts:
        print("; ".join(counts) + ": each named above", file=sys.stderr)
    if short:
        print(short_videos_note(short), file=sys.stderr)


def write_timelines(args: argparse.Namespace, videos: Sequence[str], timeline_of: Callable[[str], Timeline],
                    out: Path, source: str) -> int:
    """``--timeline``: each video's :func:`~dna_video.analysis.windows.write_timeline` files in
    ``out`` (a second video of one name gets ``_2``), its throughput and first segments on the
    console; a video that cannot be read or is too small is named in one line and the others go
    on. ``timeline_of(path)``: the video's timeline (PyTorch or ONNX Runtime); ``source``: the
    model file, recorded in the JSON. Returns the exit status (1: no video done)."""
    stems: dict[str, int] = {}
    failed, done, video_s, wall_s = 0, 0, 0.0, 0.0
    for path in videos:
        try:
            timeline = timeline_of(path)
        except (VideoTooSmallError, VideoDecodeError) as exc:
            what = "refused" if isinstance(exc, VideoTooSmallError) else "cannot read"
            log.warning("%s %s: %s", what, path, exc.reason)
            failed += 1
            continue
        stem = Path(path).stem
        stems[stem] = stems.get(stem, 0) + 1
        if stems[stem] > 1:  # two videos of one name: the files of the second get a number
            stem = f"{stem}_{stems[stem]}"
        files = write_timeline(timeline, out, stem, args.smooth, args.min_segment, args.top_k,
                               extra={"checkpoint": source})
        done += 1
        video_s, wall_s = video_s + timeline.stats.video_seconds, wall_s + timeline.stats.seconds
        print(describe(timeline))
        shown = files.segments[:12]
        for segment in shown:
            print(f"  {segment.start_s:9.2f} - {segment.end_s:9.2f} s  {segment.name} {segment.prob:.3f}")
        if len(files.segments) > len(shown):
            print(f"  (+{len(files.segments) - len(shown)} more segments: {files.paths['json'].name})")
        print(f"wrote {', '.join(p.name for p in files.paths.values())} to {out}")
    if done > 1:
        print(f"{done} videos: {video_s:.1f} s of video in {wall_s:.2f} s "
              f"({video_s / wall_s if wall_s else float('inf'):.1f} s of video per second)")
    if failed:
        print(f"{failed} of {len(videos)} videos could not be read or were refused: each named above", file=sys.stderr)
    return 0 if done else 1
