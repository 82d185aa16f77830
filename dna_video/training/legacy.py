"""0.1's separate training commands, kept for one release: ``python -m dna_video.image_cli``
and ``python -m dna_video.probe`` are the one command (:mod:`.cli`) with the image or the probe
module as the default task, so their 0.1 configs (which name no ``model.class_path``) still run."""

from __future__ import annotations

from dna_video.tasks import ImageClassifier, ProbeClassifierModule
from dna_video.training.cli import DnACLI, console_main, main

__all__ = ["image_main", "probe_main"]


def image_main(args: list[str] | None = None, run: bool = True) -> DnACLI | None:
    """``python -m dna_video.image_cli ...``: the command with ImageClassifier as the default
    task. With ``args`` (from Python): the CLI object, errors raised; without: the command line."""
    if args is None:
        return console_main(model_class=ImageClassifier)
    return main(args, run=run, model_class=ImageClassifier)


def probe_main(args: list[str] | None = None, run: bool = True) -> DnACLI | None:
    """``python -m dna_video.probe ...``: the command with ProbeClassifierModule as the default
    task. With ``args`` (from Python): the CLI object, errors raised; without: the command line."""
    if args is None:
        return console_main(model_class=ProbeClassifierModule)
    return main(args, run=run, model_class=ProbeClassifierModule)
