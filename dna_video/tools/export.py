"""Command line: export a trained model, to deploy it or to share it.

    dna-video export onnx CHECKPOINT OUT.onnx [--int8] [data settings]
    dna-video export pt2 CHECKPOINT OUT.pt2 [data settings]
    dna-video export huggingface CHECKPOINT OUT_DIR [--class-names FILE]
    dna-video export reference CHECKPOINT OUT.pyth [--epoch N]

CHECKPOINT is this project's .ckpt or any checkpoint the importer reads (a .pyth, a Hugging
Face folder...).

onnx writes the model by PyTorch's dynamo-based ONNX exporter (ONNX Runtime runs it; needs
the deploy extra, ".[deploy]"); pt2 writes the torch.export program (torch.export.load reads
it). Input 'video' (batch, channels, frames, crop, crop) float32, normalised; output 'logits'
(batch, classes); the batch is dynamic (views of one video, or several videos). Inside the
file: class names, frames, sampling rate, crop size, mean and std, views and how they are
averaged (ONNX metadata properties, JSON values; the pt2 archive's extra file
dna_video.json). The data settings are the checkpoint's evaluation settings unless given.
onnx --int8 also writes OUT.int8.onnx beside OUT.onnx: ONNX Runtime's dynamic int8
quantisation (int8 weights in every MatMul and Conv, activations quantised per call), the same
metadata inside, run by predict as OUT.onnx is (docs/deploy.md has its measured size, speed and
accuracy).

huggingface writes a softmax model as a save_pretrained folder (config.json,
model.safetensors) for transformers' TimesformerForVideoClassification.from_pretrained;
--class-names (one per line, in label order) become its id2label. reference writes a softmax
or DnA model as the reference TimeSformer's .pyth ('model_state' with every official key under
'model.', 'epoch', 'cfg'), the file the authors' code loads (TEST.CHECKPOINT_FILE_PATH or
TRAIN.CHECKPOINT_FILE_PATH); it imports CHECKPOINT strictly, so the file holds exactly the
trained model. Both print the import report first.

Files are written whole or not at all; a failed export prints one line (for onnx and pt2,
naming the operation and the attention kind) and exits 1.
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
from dna_video.checkpoints.io import CheckpointError
from dna_video.checkpoints.loading import timesformer_from_checkpoint
from dna_video.export.errors import ExportError
from dna_video.export.huggingface import export_huggingface
from dna_video.export.int8 import INT8_SUFFIX, int8_path, quantize_onnx, require_quantization
from dna_video.export.metadata import runtime_metadata
from dna_video.export.program import export_onnx, export_pt2
from dna_video.export.reference import export_reference
from dna_video.tools.predict import add_settings_arguments, settings_overrides

__all__ = ["FORMATS", "main"]

# Format -> what it writes (the subcommand's help).
FORMATS = {
    "onnx": "ONNX model for ONNX Runtime (PyTorch's dynamo-based exporter), the data settings inside",
    "pt2": "torch.export archive (torch.export.load), the data settings inside",
    "huggingface": "a softmax TimeSformer as a Hugging Face save_pretrained folder",
    "reference": "a softmax or DnA TimeSformer as the reference TimeSformer's .pyth (model_state, model. prefix)",
}
DEPLOY_EXPORTERS = {"onnx": export_onnx, "pt2": export_pt2}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dna-video export",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="format", required=True)
    for name, text in FORMATS.items():
        command = sub.add_parser(name, help=text, description=text)
        command.add_argument("checkpoint", help="this project's .ckpt (or any checkpoint the importer reads)")
        if name == "onnx":
            command.add_argument("out", help="file to write, e.g. model.onnx")
            command.add_argument(
                "--int8", action="store_true",
                help="also write OUT's dynamic int8 quantisation (ONNX Runtime's quantize_dynamic) beside it, "
                     f"as <stem>{INT8_SUFFIX}",
            )
        elif name == "pt2":
            command.add_argument("out", help="file to write, e.g. model.pt2")
        elif name == "huggingface":
            command.add_argument("out", help="folder to write config.json and model.safetensors to")
            command.add_argument("--class-names", help="text file with one class name per line, in label order")
        else:
            command.add_argument("out", help="file to write, e.g. model.pyth")
            command.add_argument("--epoch", type=int, default=0, help="the file's 'epoch' entry (default 0)")
        if name in DEPLOY_EXPORTERS:
            add_settings_arguments(command)  # --num-heads among them
        else:
            command.add_argument("--num-heads", type=int, help="attention heads, when the checkpoint does not say")
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


def _deploy(args: argparse.Namespace) -> int:
    """``onnx`` / ``pt2``: the network traced, with the data settings a runtime needs inside."""
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
        out = _quietly(DEPLOY_EXPORTERS[args.format], loaded.net, args.out, metadata)
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


def _class_names(path: str | None) -> list[str] | None:
    """The lines of a class-names file, blank ones left out (None: no file given)."""
    names = Path(path).read_text().split("\n") if path else None
    return [n.strip() for n in names if n.strip()] if names else None


def _share(args: argparse.Namespace) -> int:
    """``huggingface`` / ``reference``: the imported TimeSformer in another project's layout."""
    overrides = {"num_heads": args.num_heads} if args.num_heads else {}
    try:
        model, report = timesformer_from_checkpoint(
            args.checkpoint, load_kwargs={"log_report": False, "strict": args.format == "reference"}, **overrides
        )
        print(report.table())
        if args.format == "huggingface":
            out = export_huggingface(model, args.out, _class_names(args.class_names))
            print(f"wrote {out / 'config.json'} and {out / 'model.safetensors'}")
        else:
            print(f"wrote {export_reference(model, args.out, epoch=args.epoch)}")
    except (CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return _deploy(args) if args.format in DEPLOY_EXPORTERS else _share(args)


if __name__ == "__main__":
    sys.exit(main())
