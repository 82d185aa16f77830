"""Export of a trained TimeSformer for deployment, with everything a runtime needs inside the file:

* :func:`export_onnx`: an ``.onnx`` model by PyTorch's dynamo-based exporter (``torch.export``
  then translation to ONNX), input ``video`` (B, C, T, H, W) float32, already normalised, output
  ``logits`` (B, classes); the batch dimension is dynamic (``batch``), T, H and W are fixed;
* :func:`export_pt2`: a ``torch.export`` archive (``.pt2``) of the same program, for
  ``torch.export.load``;
* :func:`quantize_onnx`: ONNX Runtime's dynamic int8 quantisation of an exported ``.onnx``
  (weights of every MatMul and Conv stored as int8, activations quantised per call), with the
  same metadata, beside it as ``<stem>.int8.onnx`` (:func:`int8_path`).

What a runtime needs (:func:`runtime_metadata`: class names, frames, sampling rate, crop size,
mean and std, views, aggregation, decoder, patch size) rides in the file: one ONNX metadata
property per key, each value JSON text; in the ``.pt2`` archive the extra file
``dna_video.json`` (the same keys, one JSON object). :func:`read_metadata` reads either back;
:mod:`dna_video.runtime` runs an ``.onnx`` file on videos without torch.

Both trace the model once with an example batch of 2 (the exporter fixes a dimension it sees
as 1) under ``torch.no_grad`` (the inference path of every attention kind). A failed export
raises :class:`ExportError`, one line naming the failing operation and the attention kind.
Files are written whole or not at all. The ONNX packages (``onnx``, ``onnxscript``;
``onnxruntime`` to run the file) are the ``deploy`` extra.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dna_video import __version__
from dna_video.common.atomic import atomic_path
from dna_video.models.attention import kind_of
from dna_video.models.timesformer import TimeSformer

__all__ = [
    "ExportError",
    "INPUT_NAME",
    "OUTPUT_NAME",
    "PT2_METADATA_FILE",
    "runtime_metadata",
    "export_program",
    "export_onnx",
    "export_pt2",
    "read_metadata",
    "load_pt2",
    "INT8_SUFFIX",
    "int8_path",
    "require_quantization",
    "quantize_onnx",
]

INPUT_NAME = "video"
OUTPUT_NAME = "logits"
#: The extra file of a ``.pt2`` archive that holds :func:`runtime_metadata`.
PT2_METADATA_FILE = "dna_video.json"
#: The example batch the model is traced with: the exporter specialises a dimension it sees as 1.
EXAMPLE_BATCH = 2
# The evaluation settings a runtime needs (the rest of EvalSettings rides along when given).
_REQUIRED_SETTINGS = ("num_frames", "sampling_rate", "crop_size", "mean", "std")
_SETTINGS = _REQUIRED_SETTINGS + ("target_fps", "sampling", "short_video", "num_clips", "num_crops", "decoder")


class ExportError(RuntimeError):
    """An export that failed: ``operation`` (an ATen/prims operator such as
    ``aten._linalg_svd.default``, or the source line the tracer stopped at) and ``kind`` (the
    attention kind it is in, or the model's kinds when it could not be placed)."""

    def __init__(self, message: str, operation: str, kind: str) -> None:
        super().__init__(message)
        self.operation = operation
        self.kind = kind


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


def _example(net: TimeSformer, metadata: Mapping[str, Any]) -> Tensor:
    """The example input: :data:`EXAMPLE_BATCH` clips of the metadata's frames and crop (the
    exported graph keeps T, H and W fixed at these)."""
    crop = int(metadata["crop_size"])
    in_chans = net.patch_embed.proj.in_channels
    generator = torch.Generator().manual_seed(0)
    example = torch.randn(EXAMPLE_BATCH, in_chans, int(metadata["num_frames"]), crop, crop, generator=generator)
    return example.to(net.patch_embed.proj.weight.device)


def export_program(net: TimeSformer, metadata: Mapping[str, Any]) -> torch.export.ExportedProgram:
    """``net`` traced by ``torch.export`` in eval mode, with a dynamic batch dimension; input
    (B, C, T, H, W) with T and the crop of ``metadata`` (:func:`runtime_metadata`).

    Raises:
        ExportError: the tracer failed (naming the source line and the attention kind).
    """
    net.eval()
    example = _example(net, metadata)
    batch = torch.export.Dim("batch")
    try:
        with torch.no_grad():
            return torch.export.export(net, (example,), dynamic_shapes={"video": {0: batch}})
    except Exception as exc:  # noqa: BLE001 - the tracer raises many kinds; all become one line
        raise _export_error(net, exc, "torch.export", _fails_torch_export) from exc


def export_onnx(
    net: TimeSformer,
    path: str | Path,
    metadata: Mapping[str, Any],
    program: torch.export.ExportedProgram | None = None,
) -> Path:
    """Write ``net`` to ``path`` as ONNX (the exporter's default opset, weights inside the file)
    with ``metadata`` as its metadata properties (JSON values); returns the path.

    ``program``: ``net``'s :func:`export_program` when it is already made (skips tracing again).

    Raises:
        ExportError: tracing or translation failed (naming the operation and the attention kind).
        ImportError: the ONNX exporter's packages are missing (the ``deploy`` extra).
    """
    _require("onnx", "onnxscript")
    net.eval()
    program = program if program is not None else export_program(net, metadata)
    try:
        onnx_program = torch.onnx.export(
            program, dynamo=True, input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], verbose=False,
        )
    except Exception as exc:  # noqa: BLE001 - the exporter raises many kinds; all become one line
        raise _export_error(net, exc, "the ONNX translation", _fails_onnx) from exc
    onnx_program.rename_axes({onnx_program.model.graph.inputs[0].shape[0]: "batch"})
    onnx_program.model.metadata_props.update({key: json.dumps(value) for key, value in metadata.items()})
    with atomic_path(path) as partial:
        # One file: external data would be named after the temporary file (and split the model).
        onnx_program.save(partial, external_data=False)
    return Path(path)


def export_pt2(
    net: TimeSformer,
    path: str | Path,
    metadata: Mapping[str, Any],
    program: torch.export.ExportedProgram | None = None,
) -> Path:
    """Write ``net``'s ``torch.export`` program to ``path`` (``.pt2``) with ``metadata`` as the
    archive's extra file :data:`PT2_METADATA_FILE`; returns the path. ``program`` as in
    :func:`export_onnx`.

    Raises:
        ExportError: tracing failed (naming the source line and the attention kind).
    """
    program = program if program is not None else export_program(net, metadata)
    with atomic_path(path) as partial:
        torch.export.save(program, partial, extra_files={PT2_METADATA_FILE: json.dumps(dict(metadata))})
    return Path(path)


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
                          f"{missing} does not import): pip install 'dna-video[deploy]'") from None


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
            raise ExportError(f"int8 quantisation of {source} failed in {step}: {_reason(_chain(exc))}",
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


def load_pt2(path: str | Path) -> tuple[torch.export.ExportedProgram, dict[str, Any]]:
    """A ``.pt2`` of :func:`export_pt2`: the program (``.module()`` runs it) and its metadata."""
    extra = {PT2_METADATA_FILE: ""}
    program = torch.export.load(path, extra_files=extra)
    return program, json.loads(extra[PT2_METADATA_FILE] or "{}")


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The :func:`runtime_metadata` written into an ``.onnx`` or ``.pt2`` file."""
    path = Path(path)
    if path.suffix == ".onnx":
        _require("onnx")
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


# -- errors ---------------------------------------------------------------------------------------

def _require(*modules: str) -> None:
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"ONNX export needs {', '.join(missing)}: pip install 'dna-video[deploy]' (onnx, onnxscript, onnxruntime)"
        )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# What the exporter's messages say about the failing operation, most specific first.
_OPERATOR = (
    re.compile(r"OpOverload\(op='([\w.]+)', overload='(\w+)'\)"),  # no ONNX function for it
    re.compile(r"target=torch\.ops\.([\w.]+)"),  # the graph node being translated
)
_CALL = re.compile(r'The following call raised this error:\s*\n\s*File "([^"]+)", line (\d+), in (\S+)\s*\n\s*(.+)')


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes, outermost first."""
    seen: list[BaseException] = []
    while exc is not None and all(exc is not e for e in seen):
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _operation(chain: list[BaseException]) -> str:
    """The operator or the source line the exporter's exceptions name; '' when none does."""
    texts = [_ANSI.sub("", str(e)) for e in chain]
    for pattern in _OPERATOR:
        for text in reversed(texts):  # the innermost exception is the most precise
            if match := pattern.search(text):
                return ".".join(match.groups())
    for text in texts:
        if match := _CALL.search(text):
            file, line, function, code = match.groups()
            return f"`{code.strip()}` ({Path(file).name}:{line}, in {function})"
    return ""


def _reason(chain: list[BaseException]) -> str:
    """The innermost exception's type and first line."""
    inner = chain[-1]
    first = next((line.strip() for line in _ANSI.sub("", str(inner)).splitlines() if line.strip()), "")
    return f"{type(inner).__name__}: {first}" if first else type(inner).__name__


def _kinds(net: nn.Module) -> dict[str, nn.Module]:
    """One attention module of each kind in ``net``, by kind name (the registry's, not a class)."""
    found: dict[str, nn.Module] = {}
    for module in net.modules():
        kind = kind_of(module)
        if kind is not None:
            found.setdefault(kind.name, module)
    return found


def _fails_torch_export(module: nn.Module, example: Tensor) -> bool:
    try:
        with torch.no_grad():
            torch.export.export(module, (example,))
    except Exception:  # noqa: BLE001 - any failure counts
        return True
    return False


def _fails_onnx(module: nn.Module, example: Tensor) -> bool:
    try:
        with torch.no_grad():
            torch.onnx.export(torch.export.export(module, (example,)), dynamo=True, verbose=False)
    except Exception:  # noqa: BLE001 - any failure counts
        return True
    return False


def _export_error(net: TimeSformer, exc: BaseException, stage: str,
                  fails: Callable[[nn.Module, Tensor], bool]) -> ExportError:
    """One :class:`ExportError` for ``exc``: the operation, the attention kind, the reason.

    The kind: the model's only kind when it has one; else each kind's attention module is
    exported alone, and the first that fails is named."""
    chain = _chain(exc)
    operation = _operation(chain) or "an unnamed operation"
    kinds = _kinds(net)
    where = ""
    if len(kinds) == 1:
        kind = next(iter(kinds))
    else:
        kind = net.attention
        for name, module in kinds.items():
            if fails(module.eval(), torch.randn(EXAMPLE_BATCH, 4, getattr(module, "dim", net.embed_dim))):
                kind, where = name, f", in its {name!r} attention"
                break
        else:
            where = ", outside the attention" if kinds else ""
    return ExportError(
        f"export of the TimeSformer with {net.attention!r} attention failed in {stage} at {operation}{where}: "
        f"{_reason(chain)}", operation=operation, kind=kind,
    )
