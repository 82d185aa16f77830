"""Command line: export a trained model for deployment, as ONNX or as a torch.export archive.

    dna-video export onnx CHECKPOINT OUT.onnx [--int8] [data settings]
    dna-video export pt2 CHECKPOINT OUT.pt2 [data settings]

onnx writes the model by PyTorch's dynamo-based ONNX exporter (ONNX Runtime runs it; needs
the deploy extra: pip install 'dna-video[deploy]'); pt2 writes the torch.export program
(torch.export.load reads it). Input 'video' (batch, channels, frames, crop, crop) float32,
normalised; output 'logits' (batch, classes); the batch is dynamic (views of one video, or
several videos). Inside the file: class names, frames, sampling rate, crop size, mean and
std, views and how they are averaged (ONNX metadata properties, JSON values; the pt2 archive's
extra file dna_video.json). The data settings are the checkpoint's evaluation settings unless
given. onnx --int8 also writes OUT.int8.onnx beside OUT.onnx: ONNX Runtime's dynamic int8
quantisation (int8 weights in every MatMul and Conv, activations quantised per call), the same
metadata inside, run by predict as OUT.onnx is (docs/deploy.md has its measured size, speed and
accuracy). Files are written whole or not at all; a failed export prints one line naming the
operation and the attention kind, and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dna_video.prediction.torch_backend import load_model
from dna_video.checkpoints.deploy import (
    INT8_SUFFIX,
    ExportError,
    export_onnx,
    export_pt2,
    int8_path,
    quantize_onnx,
    require_quantization,
    runtime_metadata,
)
from dna_video.checkpoints.io import CheckpointError
from dna_video.tools.predict import add_settings_arguments, settings_overrides

EXPORTERS = {"onnx": export_onnx, "pt2": export_pt2}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dna-video export",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="format", required=True)
    helps = {
        "onnx": "ONNX model for ONNX Runtime (PyTorch's dynamo-based exporter)",
        "pt2": "torch.export archive (torch.export.load)",
    }
    for name, text in helps.items():
        command = sub.add_parser(name, help=text, description=text)
        command.add_argument("checkpoint", help="this project's .ckpt (or any checkpoint the importer reads)")
        command.add_argument("out", help=f"file to write, e.g. model.{name}")
        if name == "onnx":
            command.add_argument(
                "--int8", action="store_true",
                help="also write OUT's dynamic int8 quantisation (ONNX Runtime's quantize_dynamic) beside it, "
                     f"as <stem>{INT8_SUFFIX}",
            )
        add_settings_arguments(command)
    return parser


def _quietly(export: Callable[..., Path], *args: Any) -> Path:
    """``export(*args)`` with the tracer's diagnostics held back: on a failure torch logs and
    prints the partial graph and its guards (dozens of lines) before it raises; the one-line
    :class:`ExportError` says what failed. After a success what it wrote goes out as usual."""
    torch_log = logging.getLogger("torch")
    level = torch_log.level
    torch_log.setLevel(logging.ERROR)
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            out = export(*args)
    finally:
        torch_log.setLevel(level)
    sys.stderr.write(held.getvalue())
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    overrides = {k: v for k, v in settings_overrides(args).items() if v is not None}
    int8 = getattr(args, "int8", False)
    try:
        if int8:  # before the export, which takes a while
            require_quantization()
        loaded = load_model(args.checkpoint, num_heads=args.num_heads, **overrides)
        metadata = runtime_metadata(
            loaded.net, dataclasses.asdict(loaded.settings), loaded.class_names, loaded.aggregate,
            source=Path(args.checkpoint).name,
        )
        out = _quietly(EXPORTERS[args.format], loaded.net, args.out, metadata)
    except (CheckpointError, ExportError, FileNotFoundError, ImportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(
        f"wrote {out}: {loaded.net.attention} TimeSformer, {len(loaded.class_names)} classes, input "
        f"(batch, {loaded.net.patch_embed.proj.in_channels}, {metadata['num_frames']}, {metadata['crop_size']}, {metadata['crop_size']})"
    )
    if int8:
        try:
            quantized = quantize_onnx(out, int8_path(out))
        except (ExportError, ImportError, ValueError) as e:
            print(f"error: {e} ({out} is written)", file=sys.stderr)
            return 1
        size, fp32_size = quantized.stat().st_size, out.stat().st_size
        print(f"wrote {quantized}: int8 weights (ONNX Runtime dynamic quantisation), "
              f"{size / 2**20:.2f} MiB against {fp32_size / 2**20:.2f} MiB in fp32")
    return 0


if __name__ == "__main__":
    sys.exit(main())
