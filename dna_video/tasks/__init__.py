"""The LightningModules: loss, metrics, evaluation and optimisation around a network of
:mod:`dna_video.models`, over one small base (:mod:`.base`). Video classification
(:mod:`.video`), image classification (:mod:`.image`) and probes over a frozen backbone
(:mod:`.probe`); metrics and the combination of a video's views (:mod:`.metrics`, :mod:`.views`).
A config chooses one by ``model.class_path`` (e.g. ``dna_video.tasks.ProbeClassifierModule``)."""

from dna_video.tasks.base import TaskModule
from dna_video.tasks.image import ImageClassifier
from dna_video.tasks.probe import ProbeClassifierModule, ProbeOptions
from dna_video.tasks.video import Evaluation, Schedule, VideoClassifier

__all__ = ["Evaluation", "ImageClassifier", "ProbeClassifierModule", "ProbeOptions", "Schedule", "TaskModule",
           "VideoClassifier"]
