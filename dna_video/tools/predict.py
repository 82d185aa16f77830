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
cannot be decoded is reported by name and the others still come out; the exit status is 1
when no video could be read.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dna_video.common.atomic import atomic_path, write_text
from dna_video.analysis.inference import LoadedModel, device_of, load_model, read_views
from dna_video.training.callbacks.predictions import write_predictions_csv
from dna_video.data.video import VideoDecodeError
from dna_video.tasks.views import mean_view_probs

log = logging.getLogger(__name__)

__all__ = [
    "VIDEO_SUFFIXES", "collect_videos", "predict_videos", "prediction_records", "write_features",
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
    """Each video's evaluation views, or the reason it could not be read."""

    def __init__(self, videos: Sequence[str], model: LoadedModel) -> None:
        self.videos = list(videos)
        self.settings = model.settings

    def __len__(self) -> int:
        return len(self.videos)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.videos[index]
        try:
            return {"path": path, "views": read_views(path, self.settings), "error": None}
        except (VideoDecodeError, ValueError) as exc:  # ValueError: a video without frames
            return {"path": path, "views": None, "error": str(exc)}


@torch.no_grad()
def predict_videos(
    model: LoadedModel,
    videos: Sequence[str],
    num_workers: int = 0,
    device: str | None = None,
    chunk: int = 32,
    features: bool = False,
) -> tuple[list[str], torch.Tensor, torch.Tensor | None, list[tuple[str, str]]]:
    """Probabilities (N, K) of the readable ``videos`` (their paths first), their pre-head
    features (N, D) when asked, and (path, reason) of every video that could not be read."""
    target = device_of(device)
    net = model.net.to(target).eval()
    loader = DataLoader(_Views(videos, model), batch_size=None, num_workers=num_workers)
    paths, probs, feats, failed = [], [], [], []
    for item in loader:
        if item["views"] is None:
            log.warning("cannot read %s: %s", item["path"], item["error"])
            failed.append((item["path"], item["error"]))
            continue
        view_features = torch.cat([net.forward_features(part.to(target)) for part in item["views"].split(chunk)])
        logits = net.forward_head(view_features)
        probs.append(mean_view_probs(logits[None], model.aggregate)[0].cpu())
        if features:
            feats.append(view_features.float().mean(0).cpu())
        paths.append(item["path"])
    k = model.net.num_classes
    return (
        paths,
        torch.stack(probs) if probs else torch.empty(0, k),
        (torch.stack(feats) if feats else torch.empty(0, model.net.embed_dim)) if features else None,
        failed,
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
    group.add_argument("--num-heads", type=int, help="head count, for a checkpoint of another layout that does not state it")


def settings_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "num_frames": args.num_frames, "sampling_rate": args.sampling_rate, "target_fps": args.target_fps,
        "sampling": args.sampling, "crop_size": args.crop_size,
        "mean": tuple(args.mean) if args.mean else None, "std": tuple(args.std) if args.std else None,
        "num_clips": args.clips, "num_crops": args.crops,
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
    parser.add_argument("--out", help="write the predictions to FILE.csv or FILE.json")
    parser.add_argument("--features", help="write each video's pre-head embedding with its path to FILE.npy or FILE.pt")
    parser.add_argument("--top-k", type=_positive_int, default=5, help="classes listed per video (default 5)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1... (default: cuda when available)")
    parser.add_argument("--num-workers", type=int, default=0, help="decoding processes (default 0: in this process)")
    add_settings_arguments(parser)
    return parser


def prediction_records(paths: Sequence[str], probs: torch.Tensor, labels: Sequence[int | None],
                       names: Sequence[str], top_k: int) -> list[dict[str, Any]]:
    """One record per video: ``path, label, pred, pred_name, prob`` and ``top_k`` as a list of
    ``{class, name, prob}``, most probable first (the JSON output)."""
    top = torch.topk(probs, min(top_k, probs.shape[1]), dim=1)
    records = []
    for i, path in enumerate(paths):
        ranked = [{"class": int(c), "name": names[int(c)], "prob": round(float(p), 6)}
                  for p, c in zip(top.values[i], top.indices[i])]
        records.append({"path": path, "label": labels[i], "pred": ranked[0]["class"], "pred_name": ranked[0]["name"],
                        "prob": ranked[0]["prob"], "top_k": ranked})
    return records


def _table(records: list[dict[str, Any]]) -> str:
    width = min(max((len(Path(r["path"]).name) for r in records), default=5), 48)
    lines = [f"{'video':<{width}}  top-{len(records[0]['top_k'])} (class probability)"]
    for r in records:
        text = "  ".join(f"{c['name']} {c['prob']:.3f}" for c in r["top_k"])
        lines.append(f"{Path(r['path']).name[-width:]:<{width}}  {text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.out and Path(args.out).suffix not in (".csv", ".json"):
        raise SystemExit(f"--out {args.out}: use a .csv or .json file")
    if args.features and Path(args.features).suffix not in (".npy", ".pt"):
        raise SystemExit(f"--features {args.features}: use a .npy or .pt file")
    try:
        videos = collect_videos(args.paths, args.root)
        model = load_model(args.checkpoint, num_heads=args.num_heads, **settings_overrides(args))
    except (FileNotFoundError, ValueError) as exc:  # CheckpointError is a ValueError
        raise SystemExit(f"error: {exc}") from None
    labels = dict(videos)
    paths, probs, features, failed = predict_videos(
        model, [v for v, _ in videos], args.num_workers, args.device, features=bool(args.features)
    )
    known = [labels.get(p) for p in paths]
    records = prediction_records(paths, probs, known, model.class_names, args.top_k)
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
    if failed:
        print(f"{len(failed)} of {len(videos)} videos could not be read:", file=sys.stderr)
        for path, error in failed:
            print(f"  {path}: {error}", file=sys.stderr)
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
