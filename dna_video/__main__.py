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

``predict`` is the tool when its first argument is a file (a checkpoint or an ``.onnx`` model;
the tool imports no torch until it loads a checkpoint), LightningCLI's ``predict`` over a
DataModule when it is an option (``--config ...``). ``predict``, ``predict -h`` and ``predict
--help`` are the tool's: its help shows the file mode's options and how the config mode is used.
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
    """Whether ``args`` run a tool of :data:`TOOLS`: ``predict`` only when its first argument is
    a file or a request for help (an option otherwise: LightningCLI's ``predict --config ...``)."""
    if not args or args[0] not in TOOLS:
        return False
    return args[0] != "predict" or len(args) < 2 or args[1] in ("-h", "--help") or not args[1].startswith("-")


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
