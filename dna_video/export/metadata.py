"""What a runtime needs to turn a video file into class probabilities with an exported model, and
where it rides in the file: class names, frames, sampling rate, crop size, mean and std, views,
aggregation, decoder, patch size (:func:`runtime_metadata`). In an ``.onnx`` file one metadata
property per key, each value JSON text; in a ``.pt2`` archive the extra file
:data:`PT2_METADATA_FILE` (the same keys, one JSON object). :func:`read_metadata` reads either
back; :mod:`dna_video.prediction.onnx_backend` reads an ``.onnx`` file's without torch.

No torch at import: :func:`load_pt2` imports it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dna_video import __version__
from dna_video.export.errors import require_deploy

if TYPE_CHECKING:
    import torch

    from dna_video.models.timesformer import TimeSformer

__all__ = ["INPUT_NAME", "OUTPUT_NAME", "PT2_METADATA_FILE", "runtime_metadata", "read_metadata", "load_pt2"]

INPUT_NAME = "video"
OUTPUT_NAME = "logits"
#: The extra file of a ``.pt2`` archive that holds :func:`runtime_metadata`.
PT2_METADATA_FILE = "dna_video.json"
# The evaluation settings a runtime needs (the rest of EvalSettings rides along when given).
_REQUIRED_SETTINGS = ("num_frames", "sampling_rate", "crop_size", "mean", "std")
_SETTINGS = _REQUIRED_SETTINGS + ("target_fps", "sampling", "short_video", "num_clips", "num_crops", "decoder")


def runtime_metadata(
    net: TimeSformer,
    settings: Mapping[str, Any],
    class_names: Sequence[str] | None = None,
    aggregate: str = "logits",
    source: str = "",
) -> dict[str, Any]:
    """What a runtime needs to turn a video file into class probabilities with the exported model.

    ``settings``: the evaluation clip settings by field name (``dataclasses.asdict`` of
    :class:`dna_video.data.eval_settings.EvalSettings`; ``num_frames``, ``sampling_rate``,
    ``crop_size``, ``mean`` and ``std`` required). ``class_names`` in label order
    (``class_0``... when None); ``aggregate``: how views combine (``logits``: softmax of the mean
    logits, ``probs``: mean of the view probabilities); ``source``: the checkpoint's file name.
    Every value is JSON-serialisable.
    """
    missing = [key for key in _REQUIRED_SETTINGS if settings.get(key) is None]
    if missing:
        raise ValueError(f"export: the evaluation settings lack {missing}")
    if class_names is None:
        class_names = [f"class_{i}" for i in range(net.num_classes)]
    if len(class_names) != net.num_classes:
        raise ValueError(f"export: {len(class_names)} class names for a {net.num_classes}-class model")
    values = {key: settings[key] for key in _SETTINGS if key in settings}
    for key in ("mean", "std"):
        values[key] = [float(v) for v in values[key]]
    return {
        "dna_video_version": __version__,
        "input": INPUT_NAME,
        "input_layout": "B,C,T,H,W",  # float32, RGB, scaled to [0, 1] then (x - mean) / std
        "output": OUTPUT_NAME,
        "class_names": [str(name) for name in class_names],
        **values,
        "aggregate": aggregate,
        "attention": net.attention,
        "patch_size": net.patch_size,  # a runtime refuses a video with a side below it, as predict does
        "source": source,
    }


def load_pt2(path: str | Path) -> tuple[torch.export.ExportedProgram, dict[str, Any]]:
    """A ``.pt2`` of :func:`export_pt2`: the program (``.module()`` runs it) and its metadata."""
    import torch

    extra = {PT2_METADATA_FILE: ""}
    program = torch.export.load(path, extra_files=extra)
    return program, json.loads(extra[PT2_METADATA_FILE] or "{}")


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The :func:`runtime_metadata` written into an ``.onnx`` or ``.pt2`` file."""
    path = Path(path)
    if path.suffix == ".onnx":
        require_deploy("onnx")
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        return {prop.key: json.loads(prop.value) for prop in model.metadata_props}
    # A .pt2 is a zip archive with extra files under <archive>/extra/: read the one file,
    # not the whole program (seconds for a large model); any other layout is loaded whole.
    import zipfile

    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith(f"/extra/{PT2_METADATA_FILE}")]
        if len(names) == 1:
            return json.loads(archive.read(names[0]) or "{}")
    return load_pt2(path)[1]
