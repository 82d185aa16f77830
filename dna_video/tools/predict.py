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

``--stream`` reads its one path (a file, an ``rtsp://`` or ``http://`` URL, a capture device) as
the frames arrive: each window of the timeline's plan is predicted as soon as its last frame is
in, printed and appended to ``<stem>_live.csv``; the latency and the frames dropped when the
model is slower than the source are printed at the end (:mod:`dna_video.analysis.stream`).
``--annotate`` (with ``--timeline`` or ``--stream``) writes ``<stem>_annotated.mp4`` with the
label drawn on every frame, ``--annotate-attention`` with the attention of the window blended
in (:mod:`dna_video.analysis.annotate`).

An ``.onnx`` model of ``dna-video export onnx`` in place of the checkpoint runs on ONNX Runtime
with numpy preprocessing and no torch (:mod:`.predict_onnx`; ``dna-video`` sends it there before
torch is imported); the options, table and files are this command's (:mod:`.predict_cli`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dna_video.analysis.inference import LoadedModel, VideoTooSmallError, device_of, load_model, load_views
from dna_video.analysis.predictions import prediction_records
from dna_video.common.atomic import atomic_path
from dna_video.common.run_folders import evaluation_folder
from dna_video.data.decoders import resolve_decoder
from dna_video.data.video import VideoDecodeError
from dna_video.tasks.views import mean_view_probs
from dna_video.tools.predict_cli import (
    LIST_SUFFIXES,
    VIDEO_SUFFIXES,
    add_settings_arguments,
    check_arguments,
    collect_videos,
    failure_summary,
    settings_overrides,
    run_live,
    write_predictions,
    write_timelines,
)
from dna_video.tools.predict_cli import parser as _parser

log = logging.getLogger(__name__)

__all__ = [
    "VIDEO_SUFFIXES", "LIST_SUFFIXES", "collect_videos", "Predictions", "predict_videos", "prediction_records",
    "write_features", "add_settings_arguments", "settings_overrides", "main",
]


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


def _timeline_folder(args: argparse.Namespace) -> Path:
    """``--out``, else the ``predict/`` folder of the checkpoint's run, else ``./predict``."""
    if args.out:
        return Path(args.out)
    return (evaluation_folder(args.checkpoint) or Path.cwd()) / "predict"


def _timelines(args: argparse.Namespace, model: LoadedModel, videos: Sequence[str]) -> int:
    """``--timeline``: each video's timeline files; one line of throughput per video."""
    from dna_video.analysis.timeline import parse_stride, video_timeline
    from dna_video.analysis.window_network import WindowNetwork

    stride = parse_stride(args.stride) if args.stride else None
    if model.settings.sampling != "clip":
        raise SystemExit("error: --timeline slides the clip window along the video: the model samples 'uniform' "
                         "(T segments over the whole video); give --sampling clip and a --sampling-rate")
    network = WindowNetwork(model, args.device, attention=args.annotate_attention)

    def timeline_of(path: str):
        network.window_maps.clear()  # one video's windows at a time
        return video_timeline(model, path, stride, args.device, network=network)

    return write_timelines(args, videos, timeline_of, _timeline_folder(args), model.source, model.settings,
                           (lambda: network.window_maps) if args.annotate_attention else None)


def _stream(args: argparse.Namespace, model: LoadedModel) -> int:
    """``--stream``: the one source's windows as its frames arrive (:func:`~.predict_cli.run_live`)."""
    from dna_video.analysis.window_network import WindowNetwork

    network = WindowNetwork(model, args.device, attention=args.annotate_attention)
    return run_live(args, _timeline_folder(args), model.settings, model.class_names, network.prepare,
                    network.probs_of, torch.stack, model.net.patch_size, model.source,
                    (lambda: network.window_maps) if args.annotate_attention else None)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.checkpoint.endswith(".onnx"):
        from dna_video.tools.predict_onnx import main as onnx_main

        return onnx_main(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    check_arguments(args)
    try:
        videos = [] if args.stream else collect_videos(args.paths, args.root)
        model = load_model(args.checkpoint, num_heads=args.num_heads, **settings_overrides(args))
        if not args.stream:  # a stream is read by PyAV
            resolve_decoder(model.settings.decoder)  # a decoder that cannot run here stops now, saying why
    except (FileNotFoundError, ValueError) as exc:  # CheckpointError is a ValueError
        raise SystemExit(f"error: {exc}") from None
    if args.stream:
        return _stream(args, model)
    if args.timeline:
        return _timelines(args, model, [v for v, _ in videos])
    labels = dict(videos)
    found = predict_videos(model, [v for v, _ in videos], args.num_workers, args.device, features=bool(args.features))
    paths, features = found.paths, found.features
    header = {"checkpoint": model.source, "settings": asdict(model.settings) | {"aggregate": model.aggregate}}
    records = write_predictions(args, paths, found.probs.numpy(), [labels.get(p) for p in paths], found.frames,
                                model.class_names, header, found.failed + found.refused)
    if args.features and features is not None and records:
        write_features(args.features, paths, features)
        print(f"wrote {len(paths)} feature vectors ({features.shape[1]}-d) to {args.features}")
    failure_summary(len(videos), found.failed, found.refused, model.net.patch_size, found.short)
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
