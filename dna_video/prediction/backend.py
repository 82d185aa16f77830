"""What runs the network for ``predict``: one small protocol, two backends.

A backend is a trained model with what its evaluation was: class names, data settings
(:class:`~dna_video.data.eval_settings.EvalSettings`: frames, sampling, crop, mean and std,
clips x crops, decoder), how a video's views combine (``aggregate``), the network's patch size
(a video with a side below it is refused) and where it came from (``source``). It does two
things, on numpy arrays:

* :meth:`Backend.prepare`: decoded frames (n, H, W, 3) uint8 -> each frame's evaluation views
  (n, crops, 3, crop, crop) float32 (resize, crops, normalisation);
* :meth:`Backend.logits`: views (V, 3, T, crop, crop) -> (V, K) logits.

Everything else is shared (:class:`Backend`'s own methods and the pipeline's modules): the
probabilities of a video's or window's views combined as the model was evaluated
(:func:`~dna_video.tasks.views.mean_view_probs`), windows of prepared frames laid out as views,
and the record a prediction file starts with.

The two: :class:`~dna_video.prediction.torch_backend.TorchModel` (the PyTorch network of a
checkpoint; torchvision's transform, the evaluation's own numbers; pre-head features and
attention maps) and :class:`~dna_video.prediction.onnx_backend.OnnxModel` (an exported ``.onnx``
file in ONNX Runtime, numpy preprocessing, no torch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, ClassVar

import numpy as np

from dna_video.data.eval_settings import EvalSettings
from dna_video.tasks.views import mean_view_probs

__all__ = ["Backend", "FeaturesUnavailable", "window_views"]


class FeaturesUnavailable(ValueError):
    """A backend that gives class probabilities only was asked for pre-head features."""


def window_views(windows: Sequence[Sequence[np.ndarray]]) -> np.ndarray:
    """Windows of prepared frames, each T frames of (crops, 3, crop, crop) (a list or an array)
    -> their views (B, crops, 3, T, crop, crop), the layout :meth:`Backend.probs` reads,
    written once into one array (the frames stay shared with the windows that overlap)."""
    first = windows[0][0]
    views = np.empty((len(windows), first.shape[0], first.shape[1], len(windows[0]), *first.shape[2:]), np.float32)
    for b, window in enumerate(windows):
        for t, frame in enumerate(window):
            views[b, :, :, t] = frame
    return views


class Backend(ABC):
    """A model that ``predict`` runs (see the module's docstring). Each backend has the
    attributes ``class_names`` (label order), ``settings``, ``aggregate`` (``logits``: softmax
    of the mean logits; ``probs``: mean of the views' probabilities), ``patch_size`` and
    ``source``, and the class attribute :attr:`runtime`."""

    #: What runs the network (``pytorch``, ``onnxruntime``): recorded in prediction files.
    runtime: ClassVar[str]
    class_names: list[str]
    settings: EvalSettings
    aggregate: str
    source: str

    @property
    @abstractmethod
    def patch_size(self) -> int:
        """The network's patch size: a video with a side below it is refused (0: unknown)."""

    @abstractmethod
    def prepare(self, frames: np.ndarray) -> np.ndarray:
        """(n, H, W, 3) uint8 -> (n, crops, 3, crop, crop) float32: each frame resized,
        cropped and normalised as the evaluation does."""

    @abstractmethod
    def logits(self, views: np.ndarray, chunk: int = 32) -> np.ndarray:
        """(V, 3, T, crop, crop) float32 views -> (V, K) float32 logits, ``chunk`` views a pass."""

    def embed(self, views: np.ndarray, chunk: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """(V, K) logits and (V, D) pre-head features of views (V, 3, T, crop, crop).

        Raises:
            FeaturesUnavailable: this backend gives class probabilities only.
        """
        raise FeaturesUnavailable(f"{self.source}: a {self.runtime} model gives class probabilities only")

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def combine(self, logits: np.ndarray) -> np.ndarray:
        """(B, V, K) view logits -> (B, K) float32 probabilities of each one's views combined
        as the model was evaluated (:func:`~dna_video.tasks.views.mean_view_probs`)."""
        return np.asarray(mean_view_probs(logits, self.aggregate), np.float32)

    def probs(self, views: np.ndarray, chunk: int = 32) -> np.ndarray:
        """(B, V, 3, T, crop, crop) views of B videos or windows -> (B, K) float32
        probabilities, each one's views combined (:meth:`combine`)."""
        views = np.asarray(views)
        logits = self.logits(views.reshape(-1, *views.shape[2:]), chunk)
        return self.combine(logits.reshape(views.shape[0], views.shape[1], -1))

    def probs_of(self, windows: Sequence[Sequence[np.ndarray]]) -> np.ndarray:
        """Windows of prepared frames (a timeline's, a stream's), each T frames of (crops, 3,
        crop, crop) -> (B, K) probabilities (:meth:`probs` of :func:`window_views`)."""
        return self.probs(window_views(windows))

    def header(self) -> dict[str, Any]:
        """What a prediction file records of the model: its file, its data settings and how
        views combine (and the runtime when it is not PyTorch)."""
        record: dict[str, Any] = {"checkpoint": self.source,
                                  "settings": asdict(self.settings) | {"aggregate": self.aggregate}}
        if self.runtime != "pytorch":
            record["runtime"] = self.runtime
        return record
