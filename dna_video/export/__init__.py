"""A trained TimeSformer written for others to run: ``dna-video export {onnx,pt2,huggingface,reference}
CKPT OUT`` (:mod:`dna_video.tools.export`).

* :mod:`.program`: the network traced by ``torch.export``, written as ONNX (``.onnx``, for ONNX
  Runtime) or as the ``torch.export`` archive (``.pt2``), every attention kind, dynamic batch;
* :mod:`.metadata`: what a runtime needs (class names, data settings, views) inside those files,
  and reading it back;
* :mod:`.int8`: ONNX Runtime's dynamic int8 quantisation of an ``.onnx`` file;
* :mod:`.huggingface`: a softmax model as a Hugging Face ``save_pretrained`` folder;
* :mod:`.reference`: a softmax or DnA model as the reference TimeSformer's ``.pyth``;
* :mod:`.errors`: :class:`ExportError`, one line naming the failing operation and attention kind.

The names below load their module on first use. Until 0.3 these were
``dna_video.checkpoints.export`` (Hugging Face, reference) and ``dna_video.checkpoints.deploy``
(the rest): both old paths import this package, with a DeprecationWarning, until 0.4.
"""

from __future__ import annotations

from dna_video.common.lazy import lazy_exports

_EXPORTS = {
    "ExportError": ".errors",
    "EXAMPLE_BATCH": ".program",
    "export_program": ".program",
    "export_onnx": ".program",
    "export_pt2": ".program",
    "INPUT_NAME": ".metadata",
    "OUTPUT_NAME": ".metadata",
    "PT2_METADATA_FILE": ".metadata",
    "runtime_metadata": ".metadata",
    "read_metadata": ".metadata",
    "load_pt2": ".metadata",
    "INT8_SUFFIX": ".int8",
    "int8_path": ".int8",
    "require_quantization": ".int8",
    "quantize_onnx": ".int8",
    "export_huggingface": ".huggingface",
    "export_reference": ".reference",
    "reference_attentions": ".reference",
    "reference_cfg": ".reference",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
