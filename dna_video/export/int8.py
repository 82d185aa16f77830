"""ONNX Runtime's dynamic int8 quantisation of an exported ``.onnx`` model (``dna-video export onnx
--int8``): weights of every MatMul and Conv stored as int8, activations quantised per call, the
same metadata inside, beside the fp32 file as ``<stem>.int8.onnx`` (:func:`int8_path`).
ONNX Runtime's quantisation tools (``onnxruntime.quantization``) are the ``deploy`` extra."""

from __future__ import annotations

import json
from pathlib import Path

from dna_video.common.atomic import atomic_path
from dna_video.common.install import install_extra
from dna_video.export.errors import ExportError, failure_chain, failure_reason

__all__ = ["INT8_SUFFIX", "int8_path", "require_quantization", "quantize_onnx"]

#: What :func:`int8_path` puts in place of ``.onnx``.
INT8_SUFFIX = ".int8.onnx"


def int8_path(path: str | Path) -> Path:
    """Where :func:`quantize_onnx` writes the int8 model of ``path`` by default: beside it,
    ``model.onnx`` -> ``model.int8.onnx`` (a name without ``.onnx`` gets ``.int8.onnx`` added)."""
    path = Path(path)
    stem = path.stem if path.suffix == ".onnx" else path.name
    return path.with_name(stem + INT8_SUFFIX)


def require_quantization() -> None:
    """Raise a one-line :class:`ImportError` unless ONNX Runtime's quantisation tools import
    (``onnxruntime.quantization``; its shape inference needs onnx and sympy)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: F401
        from onnxruntime.quantization.shape_inference import quant_pre_process  # noqa: F401
    except ImportError as exc:
        missing = exc.name or "onnxruntime.quantization"
        raise ImportError(f"int8 quantisation needs ONNX Runtime's quantisation tools (onnxruntime.quantization; "
                          f"{missing} does not import): {install_extra('deploy')}") from None


def quantize_onnx(source: str | Path, path: str | Path | None = None) -> Path:
    """Dynamic int8 quantisation of the ``.onnx`` model at ``source`` (one of :func:`export_onnx`),
    written to ``path`` (default :func:`int8_path` of ``source``); returns the path.

    ONNX Runtime's ``quant_pre_process`` first (shape inference and the basic graph
    optimisations, which the quantiser needs to see every weight's shape; it also drops the
    exporter's per-node source annotations), then ``quantize_dynamic``: the weights of every
    MatMul (the linear layers) and Conv (the patch embedding) stored as int8, one scale per
    tensor; at run time each such input is quantised to uint8 with a scale computed from that
    call's values (``DynamicQuantizeLinear``) and multiplied in integers (``MatMulInteger``,
    ``ConvInteger``). Layer norms, softmax, the attention products of activations
    (``q @ k``, ``attn @ v``) and the rest stay float32. The metadata properties of ``source``
    are copied unchanged (the quantiser adds its own, which are not JSON), plus
    ``quantization`` (what was done, and from which file), so that ``predict`` runs the file
    as it runs ``source``. Written whole or not at all.

    Raises:
        ImportError: ONNX Runtime's quantisation tools are missing (:func:`require_quantization`).
        ExportError: the quantiser failed (the operation is its step, the kind the model's attention).
    """
    require_quantization()
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    source = Path(source)
    path = Path(path) if path is not None else int8_path(source)
    if path.resolve() == source.resolve():
        raise ValueError(f"int8 quantisation: {path} is the fp32 model itself; give another file name")
    kept: dict[str, str] = {}
    kind = "unknown"
    with tempfile.TemporaryDirectory(prefix="dna_video_int8_") as scratch:
        prepared, quantized = Path(scratch) / "prepared.onnx", Path(scratch) / "int8.onnx"
        step = "onnx.load"
        try:
            kept = {prop.key: prop.value for prop in onnx.load(str(source), load_external_data=False).metadata_props}
            kind = str(json.loads(kept.get("attention", '"unknown"')))
            step = "onnxruntime.quantization.quant_pre_process"
            quant_pre_process(str(source), str(prepared))
            step = "onnxruntime.quantization.quantize_dynamic"
            quantize_dynamic(prepared, quantized, weight_type=QuantType.QInt8, per_channel=False)
            model = onnx.load(str(quantized))
        except Exception as exc:  # noqa: BLE001 - onnx and the quantiser raise many kinds; all become one line
            raise ExportError(f"int8 quantisation of {source} failed in {step}: {failure_reason(failure_chain(exc))}",
                              operation=step, kind=kind) from exc
    kept["quantization"] = json.dumps({
        "weights": "int8", "activations": "uint8, scale per call", "per_channel": False,
        "method": "onnxruntime.quantization.quantize_dynamic", "from": source.name,
    })
    del model.metadata_props[:]
    model.metadata_props.extend(onnx.StringStringEntryProto(key=key, value=value) for key, value in kept.items())
    with atomic_path(path) as partial:
        onnx.save(model, str(partial))
    return path
