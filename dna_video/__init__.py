"""dna-video: Denoising Attention (DnA) video transformers with PyTorch Lightning.

The package by role: :mod:`.models` (attention kinds and their registry, TimeSformer, ViT,
probe network), :mod:`.data` (datasets, DataModules, decoding, generators),
:mod:`.checkpoints` (import, conversion), :mod:`.runs` (what a run left behind: folders,
registry, summary, model card), :mod:`.export` (ONNX, pt2, Hugging Face, the reference's
``.pyth``), :mod:`.tasks` (the LightningModules), :mod:`.analysis` (maps, subspaces, reports,
denoising measures), :mod:`.prediction` (a model on videos, long videos and live sources: a
checkpoint's network, or an exported model on ONNX Runtime without torch), :mod:`.training`
(the command line, callbacks) and :mod:`.tools` (predict, analyze, prepare, checkpoints, export).

``import dna_video`` imports no torch: the names below load their module on first use
(PEP 562), so the package's pure parts work where torch is not installed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import types
import warnings

from dna_video.common.lazy import lazy_exports

# OpenMP threads that sleep when idle, unless the user chose (a training process on shared
# cores loses most of its time to spinning threads; see benchmarks/README.md). Read once, when
# torch loads: set here because `python -m dna_video` and the `dna-video` command import this
# package first.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.2.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "ATTENTIONS": "dna_video.models.attention",
    "Attention": "dna_video.models.attention",
    "AttentionKind": "dna_video.models.attention",
    "DenoisingAttention": "dna_video.models.attention",
    "SoftmaxAttention": "dna_video.models.attention",
    "build_attention": "dna_video.models.attention",
    "register_attention": "dna_video.models.attention",
    "PRESETS": "dna_video.models.timesformer",
    "TimeSformer": "dna_video.models.timesformer",
    "timesformer": "dna_video.models.timesformer",
    "timesformer_from_checkpoint": "dna_video.checkpoints",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


# -- 0.1 module paths, kept for one release -------------------------------------------------------
# Old module -> (its new module, what `python -m OLD` runs: a module or "module:function",
# whether importing warns).
# dna_video.timesformer is a public name and stays without a warning.
MOVED: dict[str, tuple[str, str | None, bool]] = {
    "dna_video.attention": ("dna_video.models.attention", None, True),
    "dna_video.attention_variants": ("dna_video.models.attention", None, True),
    "dna_video.cross_attention": ("dna_video.models.attention", None, True),
    "dna_video.mlp": ("dna_video.models.mlp", None, True),
    "dna_video.timesformer": ("dna_video.models.timesformer", None, False),
    "dna_video.vit": ("dna_video.models.vit", None, True),
    "dna_video.probe": ("dna_video.models.probe", "dna_video.training.legacy:probe_main", True),
    "dna_video.flops": ("dna_video.models.flops", None, True),
    "dna_video.metrics": ("dna_video.tasks.metrics", None, True),
    "dna_video.views": ("dna_video.tasks.views", None, True),
    "dna_video.module": ("dna_video.tasks.video", None, True),
    "dna_video.image_module": ("dna_video.tasks.image", None, True),
    "dna_video.probe_module": ("dna_video.tasks.probe", None, True),
    "dna_video.cli": ("dna_video.training.cli", "dna_video.training.cli:console_main", True),
    "dna_video.image_cli": ("dna_video.training.legacy", "dna_video.training.legacy:image_main", True),
    "dna_video.callbacks": ("dna_video.training.callbacks", None, True),
    "dna_video.predict": ("dna_video.tools.predict", "dna_video.tools.predict", True),
    "dna_video.analyze": ("dna_video.tools.analyze", "dna_video.tools.analyze", True),
    "dna_video.prepare": ("dna_video.tools.prepare", "dna_video.tools.prepare", True),
    "dna_video.checkpoints.__main__": ("dna_video.tools.checkpoints", "dna_video.tools.checkpoints", True),
    # One word per meaning: the checkpoint load report, the evaluation report, the run summary.
    "dna_video.checkpoints.report": ("dna_video.checkpoints.load_report", None, True),
    "dna_video.checkpoints.dna_init": ("dna_video.models.attention.negative_init", None, True),
    "dna_video.analysis.reports": ("dna_video.analysis.evaluation_report", None, True),
    "dna_video.callbacks.test_report": ("dna_video.training.callbacks.evaluation_report", None, True),
    "dna_video.callbacks.summary": ("dna_video.runs.summary", None, True),
}
# dna_video.runs, 0.1's run module, is a package again since 0.3 (what a run left behind); its 0.1
# names that need Lightning resolve there with a warning (dna_video/runs/__init__.py).

# -- 0.2 module paths, kept for one release: moved in 0.3, they go in 0.4 --------------------------
MOVED_IN_0_3: dict[str, tuple[str, str | None, bool]] = {
    # One folder for export (dna-video export {onnx,pt2,huggingface,reference}).
    "dna_video.checkpoints.export": ("dna_video.export", None, True),
    "dna_video.checkpoints.deploy": ("dna_video.export", None, True),
    # One room for what a run left behind.
    "dna_video.checkpoints.card": ("dna_video.runs.card", None, True),
    "dna_video.checkpoints.run_summary": ("dna_video.runs.summary", None, True),
    "dna_video.common.run_folders": ("dna_video.runs.folders", None, True),
    # Prediction in one room: one pipeline, its two backends (PyTorch, ONNX Runtime), one command.
    "dna_video.analysis.inference": ("dna_video.prediction.torch_backend", None, True),
    "dna_video.analysis.window_network": ("dna_video.prediction.torch_backend", None, True),
    "dna_video.analysis.predictions": ("dna_video.prediction.records", None, True),
    "dna_video.analysis.windows": ("dna_video.prediction.timeline", None, True),
    "dna_video.analysis.timeline": ("dna_video.prediction.timeline", None, True),
    "dna_video.analysis.stream": ("dna_video.prediction.stream", None, True),
    "dna_video.analysis.annotate": ("dna_video.prediction.annotate", None, True),
    "dna_video.runtime": ("dna_video.prediction", None, True),
    "dna_video.runtime.model": ("dna_video.prediction.onnx_backend", None, True),
    "dna_video.runtime.inference": ("dna_video.prediction.onnx_backend", None, True),
    "dna_video.runtime.preprocess": ("dna_video.prediction.views", None, True),
    "dna_video.tools.predict_cli": ("dna_video.tools.predict", None, True),
    "dna_video.tools.predict_onnx": ("dna_video.tools.predict", "dna_video.tools.predict", True),
}
MOVED.update(MOVED_IN_0_3)


def _releases(name: str) -> tuple[str, str]:
    """The release that moved ``name`` (or the moved package it lies in) and the one it goes in:
    0.1's paths, announced to go in 0.3, stay one more release beside 0.2's (both go in 0.4)."""
    moved_in_0_3 = name in MOVED_IN_0_3 or name.rpartition(".")[0] in MOVED_IN_0_3
    return ("0.3" if moved_in_0_3 else "0.2"), "0.4"


def _moved(name: str) -> tuple[str, str | None, bool] | None:
    """The entry of ``name`` or of the moved package it lies in (``dna_video.callbacks.guard``)."""
    if name in MOVED:
        return MOVED[name]
    parent, _, leaf = name.rpartition(".")
    if parent in MOVED and parent != "dna_video.checkpoints.__main__":
        new, _, warns = MOVED[parent]
        return f"{new}.{leaf}", None, warns
    return None


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the 0.1 module paths: importing one returns its new module (the same module
    object, so classes stay identical), with a DeprecationWarning naming it; ``python -m`` of
    one runs its new command. First on ``sys.meta_path``: a submodule of a moved package
    (``dna_video.callbacks.guard``) would otherwise be found again through the new package's
    path and loaded a second time under its old name. It answers only for the names in
    :data:`MOVED` and below them, none of which exists as a file any more."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("dna_video.") or _moved(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=False)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        new, _, warns = _moved(module.__name__)
        if warns:
            moved, goes = _releases(module.__name__)
            warnings.warn(f"{module.__name__} moved to {new} in dna-video {moved}; the old path goes in {goes}",
                          DeprecationWarning, stacklevel=2)
        # The import system returns what sys.modules holds under the old name once this returns.
        sys.modules[module.__name__] = importlib.import_module(new)

    def get_code(self, fullname):
        # `python -m OLD` (runpy reads the code and runs it as __main__).
        new, main, _ = _moved(fullname)
        target, shown = main or new, fullname.removesuffix(".__main__")
        module, _, function = target.partition(":")
        now = "dna-video" if function else f"python -m {module}"
        run = (f"from {module} import {function}\n{function}()\n" if function
               else f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
        goes = _releases(fullname)[1]
        source = (
            "import sys\n"
            f"sys.argv[0] = {shown!r}  # runpy leaves None for a module without a file\n"
            f"sys.stderr.write('note: python -m {shown} is now {now} (README, Commands); the old path goes in {goes}\\n')\n"
            + run
        )
        return compile(source, f"<moved {fullname}>", "exec")

    def is_package(self, fullname) -> bool:
        return False


if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        # Importing dna_video.timesformer binds the module to this attribute; `timesformer` is
        # the builder function here, as in 0.1.
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
