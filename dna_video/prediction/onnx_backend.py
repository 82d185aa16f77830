"""An exported ``.onnx`` model in ONNX Runtime as a ``predict`` backend (:class:`OnnxModel`), with
what its file says about the data; numpy preprocessing (:func:`~dna_video.prediction.views.frame_views`),
no torch anywhere on this path (``tests/test_onnx_runtime.py`` runs ``predict`` where importing
torch fails).

``dna-video export onnx`` writes the evaluation settings, class names and view aggregation
into the file's metadata properties (:func:`dna_video.export.metadata.runtime_metadata`);
:class:`OnnxModel` reads them back as :class:`~dna_video.data.eval_settings.EvalSettings`, so
that a video is sampled, cropped and normalised as the checkpoint's evaluation did it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dna_video.common.install import install_extra, pip_install
from dna_video.data.eval_settings import EvalSettings
from dna_video.prediction.backend import Backend
from dna_video.prediction.pipeline import Predictions, predict_videos
from dna_video.prediction.timeline import video_timeline
from dna_video.prediction.views import VideoViews, frame_views, load_views
from dna_video.tasks.views import mean_view_probs, softmax

__all__ = [
    "OnnxModel", "OnnxModelError", "load_onnx_model", "session_options", "providers_for",
    # 0.2's names (dna_video.runtime.model, .inference), kept one release
    "mean_view_probs", "softmax", "OnnxWindows", "VideoViews", "load_views", "Predictions", "predict_videos",
    "video_timeline",
]

# Keys without which a file is not one of ours (dna-video export writes them all).
_REQUIRED = ("class_names", "num_frames", "sampling_rate", "crop_size", "mean", "std")


class OnnxModelError(ValueError):
    """An ``.onnx`` file that cannot be run here: missing, unreadable, not exported by
    ``dna-video export onnx`` (no data settings inside), or asked for a provider ONNX Runtime
    lacks. The message says which and what to do."""


def providers_for(device: str | None, available: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """ONNX Runtime providers (and the CUDA one's options) for ``--device``: None: CUDA when
    this ONNX Runtime has it, else the CPU; ``cpu``; ``cuda`` or ``cuda:N``.

    Raises:
        OnnxModelError: CUDA asked of an ONNX Runtime without it, or another device.
    """
    if device is None:
        return (["CUDAExecutionProvider", "CPUExecutionProvider"] if "CUDAExecutionProvider" in available
                else ["CPUExecutionProvider"]), {}
    if device == "cpu":
        return ["CPUExecutionProvider"], {}
    kind, _, number = device.partition(":")
    if kind != "cuda" or (number and not number.isdigit()):
        raise OnnxModelError(f"--device {device}: an .onnx model runs on cpu, cuda or cuda:N")
    if "CUDAExecutionProvider" not in available:
        raise OnnxModelError(f"--device {device}: this ONNX Runtime has no CUDA provider (it has "
                             f"{', '.join(available)}): {pip_install('onnxruntime-gpu')}, or leave --device out")
    return ["CUDAExecutionProvider", "CPUExecutionProvider"], {"device_id": int(number or 0)}


def session_options(threads: int | None = None):
    """ONNX Runtime session options: ``threads`` intra-op threads (None: ONNX Runtime's default,
    one per physical core), and idle threads that sleep rather than spin while
    ``OMP_WAIT_POLICY`` is ``PASSIVE`` (what ``import dna_video`` sets for torch unless the
    environment says otherwise): on shared or busy cores spinning threads cost the model most of
    its time (measured on 2 busy cores: 25 against 16 ms a view for the quickstart model)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    passive = os.environ.get("OMP_WAIT_POLICY", "PASSIVE").upper() == "PASSIVE"
    options.add_session_config_entry("session.intra_op.allow_spinning", "0" if passive else "1")
    return options


@dataclass
class OnnxModel(Backend):
    """An ``.onnx`` model of ``dna-video export onnx`` and what its file says, as a ``predict``
    backend (:class:`~dna_video.prediction.backend.Backend`).

    Attributes:
        session: the ONNX Runtime ``InferenceSession``.
        class_names: names in label order.
        settings: how a video becomes the model's views (the checkpoint's evaluation settings,
            with any overrides).
        aggregate: how the views of a video combine (``logits`` or ``probs``).
        patch_size: the network's patch size: a video with a side below it is refused (0 for a
            file exported before it was recorded).
        source: the ``.onnx`` path.
        metadata: every metadata property, decoded from JSON.
    """

    session: Any
    class_names: list[str]
    settings: EvalSettings
    aggregate: str = "logits"
    patch_size: int = 0
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    runtime: ClassVar[str] = "onnxruntime"

    @property
    def input_name(self) -> str:
        return self.metadata.get("input") or self.session.get_inputs()[0].name

    def prepare(self, frames: np.ndarray) -> np.ndarray:
        """(n, H, W, 3) uint8 -> (n, crops, 3, crop, crop) float32 (numpy, :func:`frame_views`)."""
        settings = self.settings
        return frame_views(frames, settings.crop_size, settings.num_crops, settings.mean, settings.std)

    def logits(self, views: np.ndarray, chunk: int = 32) -> np.ndarray:
        """(V, 3, T, crop, crop) float32 views -> (V, K) logits, ``chunk`` views a call."""
        views = np.ascontiguousarray(views, np.float32)
        if len(views) == 0:
            return np.empty((0, self.num_classes), np.float32)
        parts = [self.session.run(None, {self.input_name: views[i:i + chunk]})[0] for i in range(0, len(views), chunk)]
        return np.concatenate(parts).astype(np.float32, copy=False)


def load_onnx_model(path: str | Path, device: str | None = None, threads: int | None = None,
                    **overrides: Any) -> OnnxModel:
    """The model at ``path`` in an ONNX Runtime session, on ``device`` (:func:`providers_for`)
    with ``threads`` intra-op threads (None: ONNX Runtime's default, one per physical core).

    ``overrides``: :class:`EvalSettings` fields to change (None: keep); frames and crop are
    fixed at export and cannot change.

    Raises:
        FileNotFoundError: no file at ``path``.
        OnnxModelError: see the class; ImportError: ONNX Runtime is not installed.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model not found: {path}")
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ImportError(f"running an .onnx model needs ONNX Runtime: {install_extra('deploy')}") from exc
    providers, cuda_options = providers_for(device, ort.get_available_providers())
    options = session_options(threads)
    provider_options = [cuda_options if p == "CUDAExecutionProvider" else {} for p in providers]
    try:
        session = ort.InferenceSession(str(path), options, providers=providers, provider_options=provider_options)
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime raises its own kinds (Fail, InvalidGraph...)
        raise OnnxModelError(f"{path}: ONNX Runtime cannot load it: {str(exc).strip().splitlines()[0]}") from exc
    raw = session.get_modelmeta().custom_metadata_map
    try:
        metadata = {key: json.loads(value) for key, value in raw.items()}
    except json.JSONDecodeError as exc:
        raise OnnxModelError(f"{path}: its metadata is not what dna-video export writes ({exc})") from exc
    missing = [key for key in _REQUIRED if key not in metadata]
    if missing:
        raise OnnxModelError(f"{path}: no {', '.join(missing)} in its metadata: export the checkpoint with "
                             "'dna-video export onnx CKPT OUT.onnx' (it writes the data settings into the file)")
    fixed = {"num_frames": metadata["num_frames"], "crop_size": metadata["crop_size"]}
    changed = {k: v for k, v in fixed.items() if overrides.get(k) not in (None, v)}
    if changed:
        asked = ", ".join(f"--{k.replace('_', '-')} {overrides[k]}" for k in changed)
        raise OnnxModelError(f"{asked}: {path.name} was exported for {fixed['num_frames']} frames of "
                             f"{fixed['crop_size']} x {fixed['crop_size']}; export again with these options instead")
    settings = EvalSettings.from_fields(metadata).replace(**overrides)
    return OnnxModel(session, [str(n) for n in metadata["class_names"]], settings,
                     metadata.get("aggregate", "logits"), int(metadata.get("patch_size") or 0), str(path), metadata)


def OnnxWindows(model: OnnxModel) -> OnnxModel:  # noqa: N802
    """0.2's ``dna_video.runtime.inference.OnnxWindows(model)``, kept one release: the model itself
    prepares frames and answers windows now (``model.prepare``, ``model.probs_of``)."""
    return model
