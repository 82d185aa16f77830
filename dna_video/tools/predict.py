"""``dna-video predict CKPT PATH...``: class predictions for any videos, no labels needed.

PATH: video files, folders (searched recursively for videos) or list files (``.txt``/``.csv``/
``.lst``: one video a line, optionally followed by an integer label as in the list-file
datasets; relative paths from ``--root``, default the list file's folder). Each video is
sampled as the checkpoint's evaluation was configured (frames, sampling rate, crop,
mean/std, clips x crops: stored in this project's checkpoints; every one can be overridden),
its views go through the network and the probabilities of their MEAN are reported (softmax
of the mean logits, or the mean of the view probabilities for a model evaluated with
``aggregate: probs``).

Printed as a table; ``--out FILE.csv`` (columns ``path, label, pred, pred_name, prob,
top_k``, as ``cli.py test`` writes) or ``--out FILE.json``; ``--features FILE.npy|.pt``
writes each video's pre-head embedding (mean over its views) with its path. A file that
cannot be decoded is named in one line saying what it is (``empty file (0 bytes)``, ``not a
video (...)``, without the decoder's own log) and the others still come out; a video with a
side below the network's patch size is refused the same way, with its size and the minimum.
A video shorter than the clip is answered with frames repeated, as in evaluation: one line
counts such videos, the table notes each (``3 of 7 frames``) and the JSON records hold
``frames`` and ``frames_needed``. The exit status is 1 when no video could be read.

``--timeline`` reads each video as a long, untrimmed recording instead: the model's clip window
slides along it (``--stride`` seconds or ``Nf`` frames, default half the window), each
window's crops are combined, ``--smooth K`` averages K neighbouring windows, and consecutive
windows of one top-1 class make a segment (``--min-segment S`` merges shorter ones). Written
into ``--out DIR`` (default: the ``predict/`` folder of the checkpoint's run, else
``./predict``), named after the video: ``<stem>_windows.csv``, ``<stem>_segments.json``,
``<stem>.srt`` and ``<stem>_timeline.png`` (:mod:`dna_video.analysis.timeline`); the
throughput is printed. A video is only read this way when asked: one label per file stays
the answer for trimmed clips.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dna_video.common.atomic import atomic_path, write_text
from dna_video.analysis.inference import LoadedModel, VideoTooSmallError, device_of, load_model, load_views
from dna_video.training.callbacks.predictions import write_predictions_csv
from dna_video.data.decoders import DECODERS, resolve_decoder
from dna_video.data.sampling import short_videos_note
from dna_video.data.video import VideoDecodeError
from dna_video.tasks.views import mean_view_probs

log = logging.getLogger(__name__)

__all__ = [
    "VIDEO_SUFFIXES", "collect_videos", "Predictions", "predict_videos", "prediction_records", "write_features",
    "add_settings_arguments", "settings_overrides", "main",
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


class _Views(Dataset):
    """Each video's evaluation views and length, or the reason it could not be read or was
    refused (a side below the network's patch size)."""

    def __init__(self, videos: Sequence[str], model: LoadedModel) -> None:
        self.videos = list(videos)
        self.settings = model.settings
        self.min_side = model.net.patch_size

    def __len__(self) -> int:
        return len(self.videos)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.videos[index]
        try:
            loaded = load_views(path, self.settings, self.min_side)
        except VideoTooSmallError as exc:
            return {"path": path, "views": None, "error": exc.reason, "refused": True}
        except VideoDecodeError as exc:
            return {"path": path, "views": None, "error": exc.reason, "refused": False}
        except ValueError as exc:  # a video without frames
            return {"path": path, "views": None, "error": str(exc), "refused": False}
        return {"path": path, "views": loaded.views, "frames": (loaded.num_frames, loaded.frames_needed)}


@dataclass
class Predictions:
    """What :func:`predict_videos` found.

    Attributes:
        paths: the videos predicted, in the order given.
        probs: (N, K) class probabilities of ``paths``.
        features: (N, D) pre-head features when asked, else None.
        failed: (path, reason) of the videos that could not be read.
        refused: (path, reason) of the videos too small for the network.
        frames: per video of ``paths``: (decodable frames, frames a clip without repeats needs).
    """

    paths: list[str]
    probs: torch.Tensor
    features: torch.Tensor | None
    failed: list[tuple[str, str]]
    refused: list[tuple[str, str]]
    frames: list[tuple[int, int]]

    @property
    def short(self) -> list[tuple[str, int, int]]:
        """(path, frames, frames needed) of the videos shorter than the clip."""
        return [(p, n, need) for p, (n, need) in zip(self.paths, self.frames) if n < need]


@torch.no_grad()
def predict_videos(
    model: LoadedModel,
    videos: Sequence[str],
    num_workers: int = 0,
    device: str | None = None,
    chunk: int = 32,
    features: bool = False,
) -> Predictions:
    """Probabilities of the readable ``videos``, their pre-head features when asked, and the
    videos that could not be read or were refused, each logged in one line with its reason."""
    target = device_of(device)
    net = model.net.to(target).eval()
    loader = DataLoader(_Views(videos, model), batch_size=None, num_workers=num_workers)
    paths, probs, feats, failed, refused, frames = [], [], [], [], [], []
    for item in loader:
        if item["views"] is None:
            what, where = ("refused", refused) if item["refused"] else ("cannot read", failed)
            log.warning("%s %s: %s", what, item["path"], item["error"])
            where.append((item["path"], item["error"]))
            continue
        frames.append(tuple(int(n) for n in item["frames"]))
        view_features = torch.cat([net.forward_features(part.to(target)) for part in item["views"].split(chunk)])
        logits = net.forward_head(view_features)
        probs.append(mean_view_probs(logits[None], model.aggregate)[0].cpu())
        if features:
            feats.append(view_features.float().mean(0).cpu())
        paths.append(item["path"])
    k = model.net.num_classes
    return Predictions(
        paths,
        torch.stack(probs) if probs else torch.empty(0, k),
        (torch.stack(feats) if feats else torch.empty(0, model.net.embed_dim)) if features else None,
        failed,
        refused,
        frames,
    )


def write_features(path: str | Path, paths: Sequence[str], features: torch.Tensor) -> Path:
    """``.pt``: ``{"paths": [...], "features": (N, D) tensor}``; ``.npy``: a structured array
    with fields ``path`` and ``features`` (loads with plain ``np.load``, no pickle)."""
    path = Path(path)
    if path.suffix not in (".pt", ".npy"):
        raise ValueError(f"--features {path}: use a .npy or .pt file")
    with atomic_path(path) as partial:
        if path.suffix == ".pt":
            torch.save({"paths": list(paths), "features": features}, partial)
        else:
            width = max((len(p) for p in paths), default=1)
            table = np.zeros(len(paths), dtype=[("path", f"U{width}"), ("features", "f4", (features.shape[1],))])
            table["path"] = list(paths)
            table["features"] = features.numpy()
            np.save(partial, table)
    return path


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dna-video predict",
        description="Top-k class predictions of a checkpoint for video files, folders or list files.",
    )
    parser.add_argument("checkpoint", help="this project's .ckpt (or any checkpoint the importer reads)")
    parser.add_argument("paths", nargs="+", help="video files, folders (searched recursively) or list files (.txt/.csv/.lst)")
    parser.add_argument("--root", help="folder the relative paths of list files start from (default: the list file's)")
    parser.add_argument("--out", help="write the predictions to FILE.csv or FILE.json (with --timeline: a folder)")
    parser.add_argument("--features", help="write each video's pre-head embedding with its path to FILE.npy or FILE.pt")
    parser.add_argument("--top-k", type=_positive_int, default=5, help="classes listed per video (default 5)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1... (default: cuda when available)")
    parser.add_argument("--num-workers", type=int, default=0, help="decoding processes (default 0: in this process)")
    timeline = parser.add_argument_group("long videos")
    timeline.add_argument("--timeline", action="store_true",
                          help="slide the clip window along each video: per-window CSV, segments as JSON and SRT, a "
                               "timeline PNG, in --out DIR (default: the checkpoint's run's predict/, else ./predict)")
    timeline.add_argument("--stride", help="between window starts: seconds (2.5, 2.5s) or frames of the file (16f); "
                                           "default half the window")
    timeline.add_argument("--smooth", type=_positive_int, default=1,
                          help="average each window's probabilities over K neighbouring windows (default 1: none)")
    timeline.add_argument("--min-segment", type=float, default=0.0,
                          help="merge segments shorter than this many seconds into a neighbour (default 0)")
    add_settings_arguments(parser)
    return parser


def prediction_records(paths: Sequence[str], probs: torch.Tensor, labels: Sequence[int | None],
                       names: Sequence[str], top_k: int,
                       frames: Sequence[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """One record per video: ``path, label, pred, pred_name, prob`` and ``top_k`` as a list of
    ``{class, name, prob}``, most probable first (the JSON output); with ``frames`` ((decodable
    frames, frames needed) per video) also ``frames`` and ``frames_needed``: a video with
    fewer frames than needed was answered with frames repeated."""
    top = torch.topk(probs, min(top_k, probs.shape[1]), dim=1)
    records = []
    for i, path in enumerate(paths):
        ranked = [{"class": int(c), "name": names[int(c)], "prob": round(float(p), 6)}
                  for p, c in zip(top.values[i], top.indices[i])]
        records.append({"path": path, "label": labels[i], "pred": ranked[0]["class"], "pred_name": ranked[0]["name"],
                        "prob": ranked[0]["prob"], "top_k": ranked})
        if frames is not None:
            records[-1]["frames"], records[-1]["frames_needed"] = frames[i]
    return records


def _table(records: list[dict[str, Any]]) -> str:
    width = min(max((len(Path(r["path"]).name) for r in records), default=5), 48)
    lines = [f"{'video':<{width}}  top-{len(records[0]['top_k'])} (class probability)"]
    for r in records:
        text = "  ".join(f"{c['name']} {c['prob']:.3f}" for c in r["top_k"])
        if r.get("frames", 0) < r.get("frames_needed", 0):
            text += f"  (short: {r['frames']} of {r['frames_needed']} frames, repeated)"
        lines.append(f"{Path(r['path']).name[-width:]:<{width}}  {text}")
    return "\n".join(lines)


def _timeline_folder(args: argparse.Namespace) -> Path:
    """``--out``, else the ``predict/`` folder of the checkpoint's run, else ``./predict``."""
    if args.out:
        return Path(args.out)
    from dna_video.training.runs import evaluation_folder

    return (evaluation_folder(args.checkpoint) or Path.cwd()) / "predict"


def _timelines(args: argparse.Namespace, model: LoadedModel, videos: Sequence[str]) -> int:
    """``--timeline``: each video's timeline files; one line of throughput per video."""
    from dna_video.analysis.timeline import describe, parse_stride, video_timeline, write_timeline

    stride = parse_stride(args.stride) if args.stride else None
    if model.settings.sampling != "clip":
        raise SystemExit("error: --timeline slides the clip window along the video: the model samples 'uniform' "
                         "(T segments over the whole video); give --sampling clip and a --sampling-rate")
    out = _timeline_folder(args)
    stems: dict[str, int] = {}
    failed, done, video_s, wall_s = 0, 0, 0.0, 0.0
    for path in videos:
        try:
            timeline = video_timeline(model, path, stride, args.device)
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
                               extra={"checkpoint": model.source})
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.timeline and args.features:
        raise SystemExit("error: --features is per video: leave it out with --timeline")
    if args.timeline and args.out and (Path(args.out).suffix in (".csv", ".json") or Path(args.out).is_file()):
        raise SystemExit(f"--out {args.out}: with --timeline, give a folder (the files are named after each video)")
    if not args.timeline and (args.stride or args.smooth != 1 or args.min_segment):
        raise SystemExit("error: --stride, --smooth and --min-segment shape a timeline: add --timeline")
    if args.timeline and args.stride:
        from dna_video.analysis.timeline import parse_stride

        try:
            parse_stride(args.stride)
        except ValueError as exc:
            raise SystemExit(f"error: --{exc}") from None
    if args.out and not args.timeline and Path(args.out).suffix not in (".csv", ".json"):
        raise SystemExit(f"--out {args.out}: use a .csv or .json file")
    if args.features and Path(args.features).suffix not in (".npy", ".pt"):
        raise SystemExit(f"--features {args.features}: use a .npy or .pt file")
    try:
        videos = collect_videos(args.paths, args.root)
        model = load_model(args.checkpoint, num_heads=args.num_heads, **settings_overrides(args))
        resolve_decoder(model.settings.decoder)  # a decoder that cannot run here stops now, saying why
    except (FileNotFoundError, ValueError) as exc:  # CheckpointError is a ValueError
        raise SystemExit(f"error: {exc}") from None
    if args.timeline:
        return _timelines(args, model, [v for v, _ in videos])
    labels = dict(videos)
    found = predict_videos(model, [v for v, _ in videos], args.num_workers, args.device, features=bool(args.features))
    paths, probs, features = found.paths, found.probs, found.features
    failed = found.failed + found.refused
    known = [labels.get(p) for p in paths]
    records = prediction_records(paths, probs, known, model.class_names, args.top_k, found.frames)
    if records:
        print(_table(records))
    if not records and (args.out or args.features):
        # Every video failed: earlier result files stay as they were.
        print(f"no video could be read: {args.out or args.features} not written", file=sys.stderr)
    elif args.out:
        if args.out.endswith(".json"):
            write_text(args.out, json.dumps({
                "checkpoint": model.source, "settings": asdict(model.settings) | {"aggregate": model.aggregate},
                "class_names": model.class_names, "predictions": records,
                "failed": [{"path": p, "error": e} for p, e in failed],
            }, indent=1, default=list))
        else:
            # One output per video: a label may be known for some videos only.
            outputs = [{"path": [p], "label": None if known[i] is None else [known[i]], "probs": probs[i: i + 1],
                        "pred": probs[i: i + 1].argmax(-1)} for i, p in enumerate(paths)]
            write_predictions_csv(args.out, outputs, model.class_names, args.top_k)
        print(f"wrote {len(records)} predictions to {args.out}")
    if args.features and features is not None and records:
        write_features(args.features, paths, features)
        print(f"wrote {len(paths)} feature vectors ({features.shape[1]}-d) to {args.features}")
    # Each failed or refused video has had its one line: the summary counts them.
    counts = [f"{len(found.failed)} of {len(videos)} videos could not be read"] if found.failed else []
    if found.refused:
        counts.append(f"{len(found.refused)} of {len(videos)} refused as too small for the model "
                      f"(a side under {model.net.patch_size} pixels)")
    if counts:
        print("; ".join(counts) + ": each named above", file=sys.stderr)
    if found.short:
        print(short_videos_note(found.short), file=sys.stderr)
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
