"""Command line: inspect a checkpoint, or export a softmax model to Hugging Face.

    python -m dna_video.checkpoints inspect PATH [--num-heads N]
    python -m dna_video.checkpoints export-hf CHECKPOINT OUT_DIR [--class-names FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .export import export_huggingface
from .io import CheckpointError
from .loading import timesformer_from_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dna_video.checkpoints", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="layout, geometry and loading report of a checkpoint")
    inspect.add_argument("path", help="checkpoint file or Hugging Face folder")
    inspect.add_argument("--num-heads", type=int, help="attention heads, when the checkpoint does not say")
    export = sub.add_parser("export-hf", help="write a softmax TimeSformer checkpoint as a Hugging Face folder")
    export.add_argument("checkpoint", help="checkpoint of a softmax TimeSformer (e.g. a .ckpt of this project)")
    export.add_argument("out_dir", help="folder to write config.json and model.safetensors to")
    export.add_argument("--class-names", help="text file with one class name per line, in label order")
    export.add_argument("--num-heads", type=int, help="attention heads, when the checkpoint does not say")
    args = parser.parse_args(argv)

    overrides = {"num_heads": args.num_heads} if args.num_heads else {}
    try:
        model, report = timesformer_from_checkpoint(
            args.path if args.command == "inspect" else args.checkpoint,
            load_kwargs={"log_report": False},
            **overrides,
        )
        print(report.table())
        if args.command == "export-hf":
            names = Path(args.class_names).read_text().split("\n") if args.class_names else None
            names = [n.strip() for n in names if n.strip()] if names else None
            out = export_huggingface(model, args.out_dir, names)
            print(f"wrote {out / 'config.json'} and {out / 'model.safetensors'}")
    except (CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
