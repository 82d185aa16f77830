"""The LightningModules: loss, metrics, evaluation and optimisation around a network of
:mod:`dna_video.models`, over one small base (:mod:`.base`). Video classification
(:mod:`.video`), image classification (:mod:`.image`) and probes over a frozen backbone
(:mod:`.probe`); metrics and the combination of a video's views (:mod:`.metrics`, :mod:`.views`).
A config chooses one by ``model.class_path`` (e.g. ``dna_video.tasks.ProbeClassifierModule``).

The names below load their module on first use (PEP 562): importing :mod:`.views` or
:mod:`.metrics` (predict does) does not import Lightning through this package.
"""

from __future__ import annotations

from dna_video.common.lazy import lazy_exports

# Public name -> the module of this package that defines it.
_EXPORTS = {
    "TaskModule": ".base",
    "ImageClassifier": ".image",
    "ProbeClassifierModule": ".probe",
    "ProbeOptions": ".probe",
    "Evaluation": ".video",
    "Schedule": ".video",
    "VideoClassifier": ".video",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
