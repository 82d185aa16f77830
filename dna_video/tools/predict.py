"""``dna-video predict MODEL PATH...``: class predictions for any videos, no labels needed.

MODEL: this project's ``.ckpt`` (or any checkpoint the importer reads), run by PyTorch; or an
``.onnx`` model of ``dna-video export onnx``, run by ONNX Runtime with numpy preprocessing and
no torch imported (``dna-video`` sends it here before anything imports torch, and this module
imports torch only when it loads a checkpoint). Both are backends of one pipeline
(:mod:`dna_video.prediction`); this module is the command: options and their checks, what is
printed, and which backend runs.

PATH: video files, folders (searched recursively for videos) or list files (``.txt``/``.csv``/
``.lst``: one video a line, optionally followed by an integer label as in the list-file
datasets; relative paths from ``--root``, default the list file's folder). Each video is
sampled as the model's evaluation was configured (frames, sampling rate, crop, mean/std, clips
x crops: stored in this project's checkpoints and in the exported file; every one can be
overridden, but an ``.onnx`` model's frames and crop), its views go through the network and the
probabilities of their MEAN are reported (softmax of the mean logits, or the mean of the view
probabilities for a model evaluated with ``aggregate: probs``).

Printed as a table; ``--out FILE.csv`` (columns ``path, label, pred, pred_name, prob,
top_k``, as ``cli.py test`` writes) or ``--out FILE.json``; ``--features FILE.npy|.pt``
writes each video's pre-head embedding (mean over its views) with its path (checkpoints). A
file that cannot be decoded is named in one line saying what it is (``empty file (0 bytes)``,
``not a video (...)``, without the decoder's own log) and the others still come out; a video
with a side below the network's patch size is refused the same way, with its size and the
minimum. A video shorter than the clip is answered with frames repeated, as in evaluation: one
line counts such videos, the table notes each (``3 of 7 frames``) and the JSON records hold
``frames`` and ``frames_needed``. The exit status is 1 when no video could be read.

``--timeline`` reads each video as a long, untrimmed recording instead: the model's clip window
slides along it (``--stride`` seconds or ``Nf`` frames, default half the window), each
window's crops are combined, ``--smooth K`` averages K neighbouring windows, and consecutive
windows of one top-1 class make a segment (``--min-segment S`` merges shorter ones). Written
into ``--out DIR`` (default: the ``predict/`` folder of the model's run, else ``./predict``),
named after the video: ``<stem>_windows.csv``, ``<stem>_segments.json``, ``<stem>.srt`` and
``<stem>_timeline.png`` (:mod:`dna_video.prediction.timeline`); the throughput is printed.

``--stream`` reads its one path (a file, an ``rtsp://`` or ``http://`` URL, a capture device) as
the frames arrive: each window is predicted as soon as its last frame is in, printed and
appended to ``<stem>_live.csv``; the latency and the frames dropped when the model is slower
than the source are printed at the end (:mod:`dna_video.prediction.stream`). A file's windows
are those of its ``--timeline``. ``--annotate`` (with ``--timeline`` or ``--stream``) writes
``<stem>_annotated.mp4`` with the label drawn on every frame, ``--annotate-attention`` with the
attention of the window blended in (checkpoints; :mod:`dna_video.prediction.annotate`).

``dna-video predict --config C --ckpt_path K`` (no file, --config first) is LightningCLI's ``predict``
over the config's DataModule instead (:mod:`dna_video.training.cli`); ``--help`` here says so.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dna_video.common.atomic import write_json, write_text
from dna_video.data.decoders import DECODERS, resolve_decoder
from dna_video.data.sampling import short_videos_note
from dna_video.data.video import VideoDecodeError, VideoTooSmallError
from dna_video.prediction.backend import Backend
from dna_video.prediction.pipeline import Predictions, predict_videos, write_features
from dna_video.prediction.records import csv_rows, prediction_records, prediction_table, write_csv
from dna_video.prediction.stream import (
    FrameReader,
    LiveCsv,
    LivePlan,
    LiveWindow,
    StreamSourceError,
    display_name,
    file_frame_count,
    is_local_file,
    latency_summary,
    open_source,
    run_stream,
    source_rate,
    stream_stem,
    summary_lines,
)
from dna_video.prediction.timeline import Timeline, describe, parse_stride, smooth, video_timeline, write_timeline
from dna_video.prediction.videos import LIST_SUFFIXES, VIDEO_SUFFIXES, collect_videos

log = logging.getLogger(__name__)

__all__ = [
    "main", "parser", "add_settings_arguments", "settings_overrides", "check_arguments", "input_options",
    "load_backend", "write_predictions", "failure_summary", "write_timelines", "run_live",
    # 0.2's names of this module, still here (the pipeline's: dna_video.prediction)
    "VIDEO_SUFFIXES", "LIST_SUFFIXES", "collect_videos", "Predictions", "predict_videos", "prediction_records",
    "write_features",
]

CONFIG_MODE = """\
config mode (--config first): LightningCLI's predict over a config's DataModule
  dna-video predict --config C --ckpt_path K      the config's prediction data (its test split),
                                                  one row per video in <run>/predict/predictions.csv
  dna-video predict --config C --help             its options (--trainer.*, --data.*, --model.*)
"""


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Options overriding the model's evaluation data settings."""
    group = parser.add_argument_group("data settings (default: as the model's evaluation)")
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


def _speed(text: str) -> float:
    """argparse type: a pacing factor of at least 0."""
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no pacing) or above, got {text}")
    return value


def _positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (argparse turns the ValueError into one usage line)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    """The options of ``dna-video predict`` on files, for a checkpoint and for an ``.onnx`` model
    alike; the help ends with the config mode's usage."""
    command = argparse.ArgumentParser(
        prog="dna-video predict",
        description="Top-k class predictions of a checkpoint or an exported .onnx model for video files, folders "
                    "or list files; a long video's timeline (--timeline); a live source (--stream).",
        epilog=CONFIG_MODE, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument("checkpoint", help="this project's .ckpt (or any checkpoint the importer reads), or a model.onnx "
                                           "of 'dna-video export onnx' (run by ONNX Runtime, without PyTorch)")
    command.add_argument("paths", nargs="+", help="video files, folders (searched recursively) or list files (.txt/.csv/.lst)")
    command.add_argument("--root", help="folder the relative paths of list files start from (default: the list file's)")
    command.add_argument("--out", help="write the predictions to FILE.csv or FILE.json (with --timeline or --stream: a "
                                       "folder)")
    command.add_argument("--features", help="write each video's pre-head embedding with its path to FILE.npy or FILE.pt "
                                            "(checkpoints)")
    command.add_argument("--top-k", type=_positive_int, default=5, help="classes listed per video (default 5)")
    command.add_argument("--device", help="cpu, cuda, cuda:1... (default: cuda when available)")
    command.add_argument("--num-workers", type=int, default=0,
                         help="threads reading the next videos while the model runs (default 0: none)")
    timeline = command.add_argument_group("long videos")
    timeline.add_argument("--timeline", action="store_true",
                          help="slide the clip window along each video: per-window CSV, segments as JSON and SRT, a "
                               "timeline PNG, in --out DIR (default: the model's run's predict/, else ./predict)")
    timeline.add_argument("--stride", help="between window starts: seconds (2.5, 2.5s) or frames of the file (16f); "
                                           "default half the window")
    timeline.add_argument("--smooth", type=_positive_int, default=1,
                          help="average each window's probabilities over K neighbouring windows (default 1: none)")
    timeline.add_argument("--min-segment", type=float, default=0.0,
                          help="merge segments shorter than this many seconds into a neighbour (default 0)")
    live = command.add_argument_group("live video and annotated output")
    live.add_argument("--stream", action="store_true",
                      help="read the one path as frames arrive (a file, an rtsp:// or http:// URL, a capture device "
                           "such as /dev/video0): each window's prediction printed and appended to <stem>_live.csv "
                           "as soon as its last frame is in; latency and drops summed up at the end")
    live.add_argument("--speed", type=_speed,
                      help="with --stream: pace the frames by their timestamps, 1 = real time, 2 = twice as fast, "
                           "0 = as fast as they decode (default 1 for a file, 0 for URLs and devices)")
    live.add_argument("--no-drop", action="store_true",
                      help="with --stream: answer every window, later and later when the model is slower than the "
                           "source (default: skip to the newest window, counting what is dropped)")
    live.add_argument("--input-format", help="with --stream: FFmpeg's input format (v4l2, avfoundation, dshow...; "
                                             "default v4l2 for /dev/video*, else guessed)")
    live.add_argument("--input-option", action="append", default=[], metavar="KEY=VALUE",
                      help="with --stream: an FFmpeg option of the source (rtsp_transport=tcp, video_size=640x480...); "
                           "repeatable")
    live.add_argument("--annotate", action="store_true",
                      help="with --timeline or --stream: write <stem>_annotated.mp4 (H.264, the source's frames, "
                           "size and rate) with the current label and probability drawn on each frame")
    live.add_argument("--annotate-attention", action="store_true",
                      help="--annotate, with the last block's spatial attention of the window shown blended over the "
                           "centre crop (DnA: positive red, negative blue); PyTorch checkpoints only")
    add_settings_arguments(command)
    return command


def input_options(pairs: Sequence[str]) -> dict[str, str]:
    """``--input-option KEY=VALUE`` pairs as FFmpeg's options.

    Raises:
        ValueError: a pair without ``=`` or without a key (named).
    """
    options = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"--input-option {pair!r}: give KEY=VALUE, e.g. rtsp_transport=tcp")
        options[key.strip()] = value
    return options


def _check_live(args: argparse.Namespace) -> None:
    """The mistakes of ``--stream`` and ``--annotate``."""
    if args.annotate_attention:
        args.annotate = True
    if args.annotate and not (args.timeline or args.stream):
        raise SystemExit("error: --annotate draws a timeline's or a stream's labels on the video: add --timeline "
                         "or --stream")
    live_only = [name for name, given in (("--speed", args.speed is not None), ("--no-drop", args.no_drop),
                                          ("--input-format", args.input_format),
                                          ("--input-option", args.input_option)) if given]
    if not args.stream:
        if live_only:
            raise SystemExit(f"error: {', '.join(live_only)} shape a live stream: add --stream")
        return
    if args.timeline:
        raise SystemExit("error: --stream already slides the window along the source: leave --timeline out")
    if len(args.paths) != 1:
        raise SystemExit(f"error: --stream reads one source, got {len(args.paths)}: {' '.join(args.paths)}")
    clashing = [name for name, given in (("--features", args.features), ("--smooth", args.smooth != 1),
                                         ("--min-segment", args.min_segment), ("--num-workers", args.num_workers),
                                         ("--decoder", args.decoder))  # a stream is read by PyAV
                if given]
    if clashing:
        raise SystemExit(f"error: {', '.join(clashing)} cannot apply to a live stream: leave them out with --stream")
    if args.out and (Path(args.out).suffix in (".csv", ".json") or Path(args.out).is_file()):
        raise SystemExit(f"--out {args.out}: with --stream, give a folder (the files are named after the source)")
    source = args.paths[0]
    if "://" not in source and not source.startswith("/dev/") and args.input_format is None and not Path(source).exists():
        raise SystemExit(f"error: no such file: {source} (a URL needs its scheme, e.g. rtsp://; a device other "
                         "than /dev/video* its --input-format)")
    try:
        input_options(args.input_option)
        if args.stride:
            parse_stride(args.stride)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}" if str(exc).startswith("--") else f"error: --{exc}") from None


def check_arguments(args: argparse.Namespace) -> None:
    """The option mistakes :func:`parser` cannot catch, each stopped in one line (SystemExit)."""
    _check_live(args)
    if args.timeline and args.features:
        raise SystemExit("error: --features is per video: leave it out with --timeline")
    if args.timeline and args.out and (Path(args.out).suffix in (".csv", ".json") or Path(args.out).is_file()):
        raise SystemExit(f"--out {args.out}: with --timeline, give a folder (the files are named after each video)")
    if not args.timeline and not args.stream and (args.stride or args.smooth != 1 or args.min_segment):
        raise SystemExit("error: --stride, --smooth and --min-segment shape a timeline: add --timeline")
    if args.timeline and args.stride:
        try:
            parse_stride(args.stride)
        except ValueError as exc:
            raise SystemExit(f"error: --{exc}") from None
    if args.out and not args.timeline and not args.stream and Path(args.out).suffix not in (".csv", ".json"):
        raise SystemExit(f"--out {args.out}: use a .csv or .json file")
    if args.features and Path(args.features).suffix not in (".npy", ".pt"):
        raise SystemExit(f"--features {args.features}: use a .npy or .pt file")
    if Path(args.checkpoint).suffix.lower() == ".onnx":
        for option, value in (("--features", args.features), ("--num-heads", args.num_heads),
                              ("--annotate-attention", args.annotate_attention)):
            if value:
                raise SystemExit(f"error: {option} is for a checkpoint: an .onnx model gives class probabilities only")


def load_backend(args: argparse.Namespace) -> Backend:
    """The model of ``args.checkpoint``: an ``.onnx`` file on ONNX Runtime (no torch imported),
    else a checkpoint's PyTorch network (torch imported here)."""
    if Path(args.checkpoint).suffix.lower() == ".onnx":
        from dna_video.prediction.onnx_backend import load_onnx_model

        return load_onnx_model(args.checkpoint, args.device, **settings_overrides(args))
    from dna_video.prediction.torch_backend import load_model

    return load_model(args.checkpoint, num_heads=args.num_heads, device=args.device,
                      attention=args.annotate_attention, **settings_overrides(args))


def _skipped(path: str, reason: str, refused: bool) -> None:
    log.warning("%s %s: %s", "refused" if refused else "cannot read", path, reason)


def write_predictions(args: argparse.Namespace, paths: Sequence[str], probs: np.ndarray,
                      labels: Sequence[int | None], frames: Sequence[tuple[int, int]], class_names: Sequence[str],
                      header: dict[str, Any], failed: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The table of the videos ``paths`` with (N, K) ``probs`` on the console, and ``--out``:
    CSV rows (:func:`~dna_video.prediction.records.csv_rows`) or JSON (``header``, e.g. the
    model and settings, then ``class_names``, ``predictions`` and the ``failed`` videos); with
    no video read, an earlier ``--out`` stays as it was. Returns the records."""
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


def _predict_files(args: argparse.Namespace, model: Backend, videos: list[tuple[str, int | None]]) -> int:
    """One answer per video: the table, ``--out``, ``--features``, the lines counting failures."""
    labels = dict(videos)
    found = predict_videos(model, [v for v, _ in videos], args.num_workers, features=bool(args.features),
                           on_skip=_skipped)
    records = write_predictions(args, found.paths, found.probs, [labels.get(p) for p in found.paths], found.frames,
                                model.class_names, model.header(), found.failed + found.refused)
    if args.features and found.features is not None and records:
        write_features(args.features, found.paths, found.features)
        print(f"wrote {len(found.paths)} feature vectors ({found.features.shape[1]}-d) to {args.features}")
    failure_summary(len(videos), found.failed, found.refused, model.patch_size, found.short)
    return 0 if records else 1


def _out_folder(args: argparse.Namespace) -> Path:
    """``--out``, else the ``predict/`` folder of the model's run (a file in ``<run>/checkpoints/``),
    else ``./predict``."""
    if args.out:
        return Path(args.out)
    from dna_video.runs.folders import evaluation_folder  # here: the runs room is only read without --out

    return (evaluation_folder(args.checkpoint) or Path.cwd()) / "predict"


def write_timelines(args: argparse.Namespace, model: Backend, videos: Sequence[str], out: Path) -> int:
    """``--timeline``: each video's :func:`~dna_video.prediction.timeline.write_timeline` files in
    ``out`` (a second video of one name gets ``_2``), its throughput and first segments on the
    console; a video that cannot be read or is too small is named in one line and the others go
    on. ``--annotate``: ``<stem>_annotated.mp4`` too (with the model's attention per window when
    it keeps it). Returns the exit status (1: no video done)."""
    if model.settings.sampling != "clip":
        raise SystemExit("error: --timeline slides the clip window along the video: the model samples 'uniform' "
                         "(T segments over the whole video); give --sampling clip and a --sampling-rate")
    stride = parse_stride(args.stride) if args.stride else None
    window_maps = getattr(model, "window_maps", None) if args.annotate_attention else None
    stems: dict[str, int] = {}
    failed, done, video_s, wall_s = 0, 0, 0.0, 0.0
    for path in videos:
        if window_maps is not None:
            window_maps.clear()  # one video's windows at a time
        try:
            timeline = video_timeline(model, path, stride)
        except (VideoTooSmallError, VideoDecodeError) as exc:
            _skipped(path, exc.reason, isinstance(exc, VideoTooSmallError))
            failed += 1
            continue
        stem = Path(path).stem
        stems[stem] = stems.get(stem, 0) + 1
        if stems[stem] > 1:  # two videos of one name: the files of the second get a number
            stem = f"{stem}_{stems[stem]}"
        files = write_timeline(timeline, out, stem, args.smooth, args.min_segment, args.top_k,
                               extra={"checkpoint": model.source})
        if args.annotate:
            _annotate(args, model, timeline, files.segments, out / f"{stem}_annotated.mp4", window_maps)
            files.paths["annotated"] = out / f"{stem}_annotated.mp4"
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


def _annotate(args: argparse.Namespace, model: Backend, timeline: Timeline, segments: list, path: Path,
              window_maps: list | None) -> None:
    from dna_video.prediction.annotate import annotate_timeline

    settings = model.settings
    frames = annotate_timeline(timeline, smooth(timeline.probs, args.smooth), segments, path, settings.crop_size,
                               settings.num_crops, window_maps=window_maps)
    print(f"annotated {frames} frames: {path.name}")


def run_live(args: argparse.Namespace, model: Backend, out: Path) -> int:
    """``--stream``: read the one source of ``args.paths`` as its frames arrive
    (:mod:`dna_video.prediction.stream`; a file's windows are its timeline's), print and append
    each window's prediction to ``out/<stem>_live.csv`` as it comes, and at the end print the
    latency, drops and how the source ended, and write ``<stem>_live.json`` (and
    ``<stem>_annotated.mp4`` with ``--annotate``). Returns the exit status: 1 when the source
    failed or no window was answered."""
    source = args.paths[0]
    name = display_name(source)
    speed = args.speed if args.speed is not None else (1.0 if is_local_file(source) else 0.0)
    stride = parse_stride(args.stride) if args.stride else None
    settings, class_names = model.settings, model.class_names
    try:
        container = open_source(source, args.input_format, input_options(args.input_option))
    except StreamSourceError as exc:
        raise SystemExit(f"error: {exc}") from None
    rate = source_rate(container.streams.video[0])
    try:
        plan = LivePlan(settings.sampler, float(rate), stride, num_frames=file_frame_count(source, container))
    except ValueError as exc:
        container.close()
        raise SystemExit(f"error: {exc}") from None
    stem = stream_stem(source)
    paths = {"csv": out / f"{stem}_live.csv", "json": out / f"{stem}_live.json"}
    rows = LiveCsv(paths["csv"], class_names, args.top_k)
    annotator = None
    if args.annotate:
        from dna_video.prediction.annotate import FrameLabel, LiveAnnotator

        paths["annotated"] = out / f"{stem}_annotated.mp4"
        annotator = LiveAnnotator(paths["annotated"], rate, settings.crop_size, settings.num_crops)
    window_maps = getattr(model, "window_maps", None) if args.annotate_attention else None
    reader = FrameReader(container, name, plan.wanted, speed, annotator.add if annotator else None)
    pace = f"paced at {speed:g} x real time" if speed > 0 else "as the frames come"
    length = f"{plan.count} windows to the end of the file, " if plan.count is not None else ""
    print(f"{name}: {float(rate):.2f} fps, {plan.span / plan.fps:.2f} s windows every {plan.stride / plan.fps:.2f} s, "
          f"{length}{pace}; {'every window answered' if args.no_drop else 'late windows skipped'}; Ctrl-C stops",
          flush=True)

    def answered(window: LiveWindow) -> None:
        rows.write(window)
        top = int(np.argmax(window.probs))
        print(f"  {window.start_s:9.2f} - {window.end_s:9.2f} s  {class_names[top]} {window.probs[top]:.3f}  "
              f"({window.latency_s * 1000:.0f} ms)", flush=True)
        if annotator is not None:
            annotator.update(FrameLabel(class_names[top], float(window.probs[top]),
                                        window_maps[-1] if window_maps else None))

    try:
        stats = run_stream(reader, plan, model.prepare, model.probs_of, drop=not args.no_drop, on_window=answered,
                           min_side=model.patch_size)
    except VideoTooSmallError as exc:
        raise SystemExit(f"refused {name}: {exc.reason}") from None
    finally:
        rows.close()
        annotated_frames = annotator.close() if annotator is not None else 0
    for number, line in enumerate(summary_lines(name, stats, plan, not args.no_drop, paths["csv"].name)):
        print(line, file=sys.stderr if number == 0 and stats.error else sys.stdout)
    if annotator is not None and annotator.error:
        print(f"the annotated video could not be written: {annotator.error}", file=sys.stderr)
        paths.pop("annotated")
    elif annotator is not None and not annotated_frames:
        paths.pop("annotated")
    write_json(paths["json"], {
        "source": name, "checkpoint": model.source, "fps": float(rate), "window_s": round(plan.span / plan.fps, 4),
        "stride_s": round(plan.stride / plan.fps, 4), "speed": speed, "drop": not args.no_drop,
        "class_names": list(class_names), "frames_read": stats.frames_read, "windows": stats.windows,
        "skipped_windows": stats.skipped_windows, "dropped_frames": stats.dropped_frames,
        "frames_after_last_window": stats.frames_after_last_window, "latency": latency_summary(stats.latencies_s),
        "seconds": round(stats.seconds, 3),
        "ended": "stopped" if stats.stopped else f"failed: {stats.error}" if stats.error else "end of source",
        "annotated_frames": annotated_frames,
    })
    print(f"wrote {', '.join(p.name for p in paths.values())} to {out}")
    return 1 if stats.error or not stats.windows else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    check_arguments(args)
    try:
        videos = [] if args.stream else collect_videos(args.paths, args.root)
        model = load_backend(args)
        if not args.stream:  # a stream is read by PyAV
            resolve_decoder(model.settings.decoder)  # a decoder that cannot run here stops now, saying why
    except (FileNotFoundError, ImportError, ValueError) as exc:  # CheckpointError, OnnxModelError: ValueErrors
        raise SystemExit(f"error: {exc}") from None
    if args.stream:
        return run_live(args, model, _out_folder(args))
    if args.timeline:
        return write_timelines(args, model, [v for v, _ in videos], _out_folder(args))
    return _predict_files(args, model, videos)


if __name__ == "__main__":
    sys.exit(main())
