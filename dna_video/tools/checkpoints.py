"""Command line: inspect a checkpoint, or write the model card of a run's checkpoint.

    dna-video checkpoints inspect PATH [--num-heads N]
    dna-video checkpoints card RUN_CHECKPOINT.ckpt [--out MODEL_CARD.md]

inspect prints the layout, geometry and import report of any importable checkpoint (a .ckpt
of this project, a .pyth, a Hugging Face folder...). card writes a model card (data, protocol,
recipe, metrics, cost per view, the exact command, the weights the run started from and their
licence) for a checkpoint of a video or probe run, from the run's own files; --out is written
whole or not at all.

export-hf and export-ref, the exports of 0.2, are now dna-video export huggingface and
dna-video export reference (the same options); the old verbs run them, with a note, until 0.4.
"""

from __future__ import annotations

import argparse
import sys

from dna_video.checkpoints.io import CheckpointError
from dna_video.checkpoints.loading import timesformer_from_checkpoint
from dna_video.common.atomic import write_text
from dna_video.runs.card import model_card

# 0.2's export verbs -> the format of `dna-video export` that replaced them (same arguments).
MOVED_VERBS = {"export-hf": "huggingface", "export-ref": "reference"}


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
    card = sub.add_parser("card", help="model card of a video or probe checkpoint written by cli.py fit (markdown)")
    card.add_argument("checkpoint", help="a .ckpt inside a run folder (runs/<name>/version_N/checkpoints/)")
    card.add_argument("--out", help="file to write (default: print)")
    return parser


def _moved_verb(verb: str, rest: list[str]) -> int:
    """An export verb of 0.2: a one-line note naming its new command (on stderr, as 0.1's moved
    commands print theirs), then that command, which parses ``rest`` itself."""
    from dna_video.tools.export import main as export

    new = f"dna-video export {MOVED_VERBS[verb]}"
    print(f"note: dna-video checkpoints {verb} is now {new} (README, Commands); the old verb goes in 0.4",
          file=sys.stderr)
    return export([MOVED_VERBS[verb], *rest])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in MOVED_VERBS:
        return _moved_verb(argv[0], argv[1:])
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
        _, report = timesformer_from_checkpoint(args.checkpoint, load_kwargs={"log_report": False}, **overrides)
        print(report.table())
    except (CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
