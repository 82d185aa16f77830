"""The one command: ``dna-video`` (installed), ``python cli.py`` (a checkout) and ``python -m
dna_video`` are this program.

    dna-video fit --config quickstart            # train any task; the config's model.class_path picks it
    dna-video {validate,test,predict} --config X # LightningCLI's other subcommands
    dna-video predict CKPT VIDEO...              # classify files with a trained checkpoint
    dna-video predict MODEL.onnx VIDEO...        # the same with an exported model, without PyTorch
    dna-video predict CKPT|MODEL.onnx SOURCE --stream [--annotate]   # live: a file, URL or camera
    dna-video predict --help                     # both predict modes and their options
    dna-video analyze {maps,subspaces} ...       # attention maps, subspace angles
    dna-video prepare ...                        # scan, validate, transcode a dataset copy
    dna-video checkpoints {inspect,card} ...     # a checkpoint's import report; a run's model card
    dna-video export {onnx,pt2} CKPT OUT [--int8] # a deployable model with its data settings inside
    dna-video export {huggingface,reference} CKPT OUT   # for transformers; for the reference code
    dna-video configs                            # the example configs shipped with the package
    dna-video --import MODULE ...                # any command, after importing your module (e.g. an attention kind)

``predict`` is the tool when it is given a file (a checkpoint or an ``.onnx`` model, before or
after the tool's options; the tool imports no torch until it loads a checkpoint), LightningCLI's
``predict`` over a DataModule when an option of that command comes first (``--config ...``).
``predict``, ``predict -h`` and ``predict --help`` are the tool's: its help shows the file
mode's options and how the config mode is used.
"""

from __future__ import annotations

import sys

__all__ = ["main", "TOOLS"]

# Subcommand -> the module whose main(argv) runs it.
TOOLS = {
    "analyze": "dna_video.tools.analyze",
    "prepare": "dna_video.tools.prepare",
    "checkpoints": "dna_video.tools.checkpoints",
    "predict": "dna_video.tools.predict",
    "export": "dna_video.tools.export",
}


def _is_tool(args: list[str]) -> bool:
    """Whether ``args`` run a tool of :data:`TOOLS`: ``predict`` only in its file mode
    (:func:`_predict_file_mode`; LightningCLI's ``predict --config ...`` otherwise)."""
    if not args or args[0] not in TOOLS:
        return False
    return args[0] != "predict" or _predict_file_mode(args[1:])


def _predict_file_mode(args: list[str]) -> bool:
    """Whether ``predict ARGS`` is the tool's file mode: a positional (the checkpoint or model)
    or a request for help comes before any option the tool does not know, the tool's options
    skipped with their values wherever they sit (``predict --top-k 3 CKPT VIDEO``); an option
    of LightningCLI's predict first (``--config``, ``--ckpt_path``, ``--trainer.*``) is the
    config mode."""
    if not args or not args[0].startswith("-") or args[0] in ("-h", "--help"):
        return True
    from dna_video.tools.predict import parser  # imports no torch

    actions = parser()._option_string_actions
    position = 0
    while position < len(args):
        token = args[position]
        if token == "--" or not token.startswith("-") or token in ("-h", "--help"):
            return True
        name, equals, _ = token.partition("=")
        # argparse's unambiguous abbreviations (--top for --top-k) are the tool's too.
        matches = [option for option in actions if option == name] or [
            option for option in actions if option.startswith("--") and option.startswith(name)]
        if len(matches) != 1:
            return False
        nargs = actions[matches[0]].nargs
        position += 1
        if equals or nargs == 0:
            continue
        if nargs in (None, 1, "?"):
            taken = 1
        elif isinstance(nargs, int):
            taken = nargs
        else:  # "*", "+": the values up to the next option
            taken = next((i for i, t in enumerate(args[position:]) if t.startswith("-")), len(args) - position)
        if nargs == "?" and (position >= len(args) or args[position].startswith("-")):
            taken = 0
        position += taken
    return True  # only the tool's options: the tool says what is missing


def main(argv: list[str] | None = None) -> None:
    from dna_video.common.plugins import import_requested

    # Your modules first (--import, anywhere on the line): what they register is then known.
    args = import_requested(list(sys.argv[1:] if argv is None else argv))
    command = args[0] if args else ""
    if command == "configs":
        from dna_video.training.configs import packaged_configs

        for name, path in packaged_configs().items():
            print(f"{name}\t{path}")
        return
    if _is_tool(args):
        import importlib

        sys.exit(importlib.import_module(TOOLS[command]).main(args[1:]))
    if command in ("-h", "--help"):
        print(__doc__.split("\n\n")[1].strip("\n") + "\n")
    from dna_video.training.cli import console_main

    console_main(args)


if __name__ == "__main__":
    main()
