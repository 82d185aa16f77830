"""Command line: inspect a checkpoint, or export a trained model to Hugging Face or back to the
reference TimeSformer's own format.

    dna-video checkpoints inspect PATH [--num-heads N]
    dna-video checkpoints export-hf CHECKPOINT OUT_DIR [--class-names FILE]
    dna-video checkpoints export-ref CHECKPOINT OUT.pyth [--epoch N]
    dna-video checkpoints card RUN_CHECKPOINT.ckpt [--out MODEL_CARD.md]

CHECKPOINT is any importable checkpoint (a .ckpt of this project, a .pyth, a Hugging Face
folder...). export-hf writes a softmax model as a save_pretrained folder. export-ref writes a
softmax or DnA model as the reference TimeSformer's .pyth ('model_state' with every official
key under 'model.', 'epoch', 'cfg'), the file the authors' code loads (TEST.CHECKPOINT_FILE_PATH
or TRAIN.CHECKPOINT_FILE_PATH); it imports CHECKPOINT strictly, so the file holds exactly the
trained model. card writes a model card (data, protocol, recipe, metrics, cost per view, the exact
command, the weights the run started from and their licence) for a checkpoint of a video or probe
run, from the run's own files; --out is written whole or not at all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dna_video.checkpoints.card import model_card
from dna_video.checkpoints.export import export_huggingface, export_reference
from dna_video.checkpoints.io import CheckpointError
from dna_video.checkpoints.loading import timesformer_from_checkpoint
from dna_video.common.atomic import write_text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dna-video checkpoints",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    heads = argparse.ArgumentParser(add_help=False)
    heads.add_argument("--num-heads", type=int, help="attention heads, when the checkpoint does not say")
    inspect = sub.add_parser("inspect", parents=[heads], help="layout, geometry and loading report of a checkpoint")
    inspect.add_argument("checkpoint", help="checkpoint file or Hugging Face folder")
    export = sub.add_parser("export-hf", parents=[heads], help="write a softmax TimeSformer as a Hugging Face folder")
    export.add_argument("checkpoint", help="checkpoint of a softmax TimeSformer (e.g. a .ckpt of this project)")
    export.add_argument("out_dir", help="folder to write config.json and model.safetensors to")
    export.add_argument("--class-names", help="text file with one class name per line, in label order")
    reference = sub.add_parser(
        "export-ref", parents=[heads],
        help="write a softmax or DnA TimeSformer as the reference TimeSformer's .pyth (model_state, model. prefix)",
    )
    reference.add_argument("checkpoint", help="checkpoint of a trained TimeSformer (e.g. a .ckpt of this project)")
    reference.add_argument("out", help="file to write, e.g. model.pyth")
    reference.add_argument("--epoch", type=int, default=0, help="the file's 'epoch' entry (default 0)")
    card = sub.add_parser("card", help="model card of a video or probe checkpoint written by cli.py fit (markdown)")
    card.add_argument("checkpoint", help="a .ckpt inside a run folder (runs/<name>/version_N/checkpoints/)")
    card.add_argument("--out", help="file to write (default: print)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "card":
        try:
            text = model_card(args.checkpoint)
        except (CheckpointError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        if args.out:
            write_text(args.out, text)
            print(f"wrote {args.out}")
        else:
            print(text, end="")
        return 0
    overrides = {"num_heads": args.num_heads} if args.num_heads else {}
    try:
        model, report = timesformer_from_checkpoint(
            args.checkpoint, load_kwargs={"log_report": False, "strict": args.command == "export-ref"}, **overrides
        )
        print(report.table())
        if args.command == "export-hf":
            names = Path(args.class_names).read_text().split("\n") if args.class_names else None
            names = [n.strip() for n in names if n.strip()] if names else None
            out = export_huggingface(model, args.out_dir, names)
            print(f"wrote {out / 'config.json'} and {out / 'model.safetensors'}")
        elif args.command == "export-ref":
            print(f"wrote {export_reference(model, args.out, epoch=args.epoch)}")
    except (CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
