"""Result files written whole or not at all.

A writer gets a temporary path beside the destination (same folder, so the final rename stays
on one file system) and the file is renamed over the destination only when the writer finished
without an error: a failed or killed command leaves the earlier file as it was, and a reader
never sees half a file. The temporary name keeps the destination's suffix, because writers
such as ``savefig`` and ``np.save`` choose the format from it.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "write_json", "write_text", "PARTIAL_MARK"]

# Part of every temporary name: `.<stem>.partial-<pid>-<token><suffix>`.
PARTIAL_MARK = ".partial-"


@contextmanager
def atomic_path(path: str | os.PathLike, fsync: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s content to; on a clean exit it replaces
    ``path`` (``os.replace``), on an exception it is removed and ``path`` is untouched.
    ``fsync`` flushes the file to disk before the rename (for checkpoints a resume relies on)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}{PARTIAL_MARK}{os.getpid()}-{secrets.token_hex(3)}{path.suffix}")
    try:
        yield partial
        if not partial.exists():
            raise FileNotFoundError(f"the writer of {path} wrote nothing (expected {partial})")
        if fsync:
            with open(partial, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """``Path.write_text`` made atomic."""
    with atomic_path(path) as partial:
        partial.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, value: Any, indent: int = 1) -> Path:
    """``value`` as JSON at ``path``, atomically; serialised before anything is written, so a
    value that is not JSON leaves no file behind."""
    return write_text(path, json.dumps(value, indent=indent) + "\n")
