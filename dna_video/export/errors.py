"""What an export says when it cannot be done: :class:`ExportError` (one line naming the failing
operation and the attention kind), and the deploy extra's packages asked for by name."""

from __future__ import annotations

import importlib.util
import re

from dna_video.common.install import install_extra

__all__ = ["ExportError", "require_deploy", "failure_chain", "failure_reason", "plain_text"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ExportError(RuntimeError):
    """An export that failed: ``operation`` (an ATen/prims operator such as
    ``aten._linalg_svd.default``, or the source line the tracer stopped at) and ``kind`` (the
    attention kind it is in, or the model's kinds when it could not be placed)."""

    def __init__(self, message: str, operation: str, kind: str) -> None:
        super().__init__(message)
        self.operation = operation
        self.kind = kind


def require_deploy(*modules: str) -> None:
    """Raise a one-line :class:`ImportError` naming the missing ``modules`` of the ``deploy`` extra."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"ONNX export needs {', '.join(missing)}: {install_extra('deploy')} (onnx, onnxscript, onnxruntime)"
        )


def failure_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes, outermost first."""
    seen: list[BaseException] = []
    while exc is not None and all(exc is not e for e in seen):
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def plain_text(exc: BaseException) -> str:
    """An exception's message without the terminal colour codes the exporter puts in it."""
    return _ANSI.sub("", str(exc))


def failure_reason(chain: list[BaseException]) -> str:
    """The innermost exception's type and first line."""
    inner = chain[-1]
    first = next((line.strip() for line in plain_text(inner).splitlines() if line.strip()), "")
    return f"{type(inner).__name__}: {first}" if first else type(inner).__name__
