"""The LightningModules: loss, metrics, evaluation and optimisation around a network of
:mod:`dna_video.models`, over one small base (:mod:`.base`). Video classification
(:mod:`.video`), image classification (:mod:`.image`) and probes over a frozen backbone
(:mod:`.probe`); metrics and the combination of a video's views (:mod:`.metrics`, :mod:`.views`).
A config chooses one by ``model.class_path`` (e.g. ``dna_video.tasks.ProbeClassifierModule``).

The names below load their module on first use (PEP 562): importing :mod:`.views` or
:mod:`.metrics` (predict does) does not import Lightning through this package.
"""

from __future__ import annotations

import importlib

# Public name -> the module of this package that defines it.
_EXPORTS = {
    "TaskModule": "base",
    "ImageClassifier": "image",
    "ProbeClassifierModule": "probe",
    "ProbeOptions": "probe",
    "Evaluation": "video",
    "Schedule": "video",
    "VideoClassifier": "video",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
