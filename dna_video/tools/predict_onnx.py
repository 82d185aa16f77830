"""``dna-video predict MODEL.onnx PATH...``: ``predict`` with an exported model, on ONNX Runtime
with numpy preprocessing, importing no torch (:mod:`dna_video.runtime`).

The command line, the table, ``--out`` (CSV with the columns of the PyTorch ``predict``, or
JSON) and ``--timeline`` are those of ``predict`` (:mod:`.predict`); the data settings come from
the file (``dna-video export onnx`` writes the checkpoint's evaluation settings into it) and can
be overridden, except the frames and the crop, fixed at export. ``--device``: ``cpu``, ``cuda``
(an ONNX Runtime with CUDA) or none (CUDA when there, else the CPU); ``--num-workers`` threads
decode ahead. ``--features``, ``--num-heads`` and ``--annotate-attention`` belong to checkpoints.
``--timeline`` and ``--stream`` write into ``--out DIR``, else ``./predict``; ``--annotate``
draws the labels. ``dna-video`` sends an ``.onnx`` model here before anything imports torch.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from dna_video.analysis.windows import parse_stride
from dna_video.data.decoders import resolve_decoder
from dna_video.runtime.inference import OnnxWindows, predict_videos, video_timeline
from dna_video.runtime.model import OnnxModel, OnnxModelError, load_onnx_model
from dna_video.tools.predict_cli import (
    check_arguments,
    collect_videos,
    failure_summary,
    parser,
    run_live,
    settings_overrides,
    write_predictions,
    write_timelines,
)

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    check_arguments(args)
    for option, value in (("--features", args.features), ("--num-heads", args.num_heads),
                          ("--annotate-attention", args.annotate_attention)):
        if value:
            raise SystemExit(f"error: {option} is for a checkpoint: an .onnx model gives class probabilities only")
    try:
        videos = [] if args.stream else collect_videos(args.paths, args.root)
        model = load_onnx_model(args.checkpoint, args.device, **settings_overrides(args))
        if not args.stream:  # a stream is read by PyAV
            resolve_decoder(model.settings.decoder)  # a decoder that cannot run here stops now, saying why
    except (FileNotFoundError, ImportError, OnnxModelError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.stream:
        windows = OnnxWindows(model)
        out = Path(args.out) if args.out else Path.cwd() / "predict"
        return run_live(args, out, model.settings, model.class_names, windows.prepare, windows.probs_of, np.stack,
                        model.patch_size, model.source)
    if args.timeline:
        return _timelines(args, model, [v for v, _ in videos])
    labels = dict(videos)
    found = predict_videos(model, [v for v, _ in videos], args.num_workers)
    header = {"checkpoint": model.source, "settings": asdict(model.settings) | {"aggregate": model.aggregate},
              "runtime": "onnxruntime"}
    records = write_predictions(args, found.paths, found.probs, [labels.get(p) for p in found.paths], found.frames,
                                model.class_names, header, found.failed + found.refused)
    failure_summary(len(videos), found.failed, found.refused, model.patch_size, found.short)
    return 0 if records else 1


def _timelines(args: argparse.Namespace, model: OnnxModel, videos: list[str]) -> int:
    """``--timeline``: each video's timeline files (``--out DIR``, else ``./predict``)."""
    if model.settings.sampling != "clip":
        raise SystemExit("error: --timeline slides the clip window along the video: the model samples 'uniform' "
                         "(T segments over the whole video); give --sampling clip and a --sampling-rate")
    stride = parse_stride(args.stride) if args.stride else None
    out = Path(args.out) if args.out else Path.cwd() / "predict"
    return write_timelines(args, videos, lambda path: video_timeline(model, path, stride), out, model.source,
                           model.settings)


if __name__ == "__main__":
    sys.exit(main())
