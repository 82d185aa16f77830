"""Export of a trained TimeSformer for deployment, traced once by ``torch.export``:

* :func:`export_onnx`: an ``.onnx`` model by PyTorch's dynamo-based exporter (``torch.export``
  then translation to ONNX), input ``video`` (B, C, T, H, W) float32, already normalised, output
  ``logits`` (B, classes); the batch dimension is dynamic (``batch``), T, H and W are fixed;
* :func:`export_pt2`: a ``torch.export`` archive (``.pt2``) of the same program, for
  ``torch.export.load``.

What a runtime needs rides in the file (:mod:`.metadata`); :mod:`.int8` quantises an ``.onnx``.

Both trace the model once with an example batch of 2 (the exporter fixes a dimension it sees
as 1) under ``torch.no_grad`` (the inference path of every attention kind). A failed export
raises :class:`~dna_video.export.errors.ExportError`, one line naming the failing operation and
the attention kind. Files are written whole or not at all. The ONNX packages (``onnx``,
``onnxscript``; ``onnxruntime`` to run the file) are the ``deploy`` extra.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dna_video.common.atomic import atomic_path
from dna_video.export.errors import ExportError, failure_chain, failure_reason, plain_text, require_deploy
from dna_video.export.metadata import INPUT_NAME, OUTPUT_NAME, PT2_METADATA_FILE
from dna_video.models.attention import kind_of
from dna_video.models.timesformer import TimeSformer

__all__ = ["EXAMPLE_BATCH", "export_program", "export_onnx", "export_pt2"]

#: The example batch the model is traced with: the exporter specialises a dimension it sees as 1.
EXAMPLE_BATCH = 2


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
    (B, C, T, H, W) with T and the crop of ``metadata`` (:func:`~dna_video.export.metadata.runtime_metadata`).

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
    require_deploy("onnx", "onnxscript")
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


# -- why an export failed ----------------------------------------------------------------------

# What the exporter's messages say about the failing operation, most specific first.
_OPERATOR = (
    re.compile(r"OpOverload\(op='([\w.]+)', overload='(\w+)'\)"),  # no ONNX function for it
    re.compile(r"target=torch\.ops\.([\w.]+)"),  # the graph node being translated
)
_CALL = re.compile(r'The following call raised this error:\s*\n\s*File "([^"]+)", line (\d+), in (\S+)\s*\n\s*(.+)')


def _operation(chain: list[BaseException]) -> str:
    """The operator or the source line the exporter's exceptions name; '' when none does."""
    texts = [plain_text(e) for e in chain]
    for pattern in _OPERATOR:
        for text in reversed(texts):  # the innermost exception is the most precise
            if match := pattern.search(text):
                return ".".join(match.groups())
    for text in texts:
        if match := _CALL.search(text):
            file, line, function, code = match.groups()
            return f"`{code.strip()}` ({Path(file).name}:{line}, in {function})"
    return ""


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
    chain = failure_chain(exc)
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
        f"{failure_reason(chain)}", operation=operation, kind=kind,
    )
