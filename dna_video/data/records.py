"""A split's videos as arrays, and the file listing they come from, at full-dataset size.

Why arrays: a DataLoader worker is a forked copy of the training process. A Python object it
merely reads (a :class:`VideoRecord`, its path string) has its reference count written, so
the memory page holding it is copied into that worker; over an epoch every record is read,
and a list of 56,880 records (NTU RGB+D 60) ends up copied into every worker (measured:
benchmarks/README.md, "Full-size datasets"). :class:`RecordTable` keeps every path in one
byte buffer with an offset array, and the labels in one integer array: reading record ``i``
touches two NumPy objects and the bytes of one path, so the pages stay shared.

Why one directory listing: a ``stat`` per file (``Path.is_dir``, ``os.path.isfile``) and
``Path`` objects (their creation and comparisons) cost seconds over 56,880 files;
:func:`list_files` walks the root with ``os.scandir`` (the file type comes with the directory
entry) and :func:`missing_files` checks a split's paths against one listing per folder.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["VideoRecord", "RecordTable", "dataset_order", "list_files", "missing_files", "sort_paths"]

# What os.fsencode / os.fsdecode use, applied directly (a call per path costs over 56,880 paths).
_ENCODING, _ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


@dataclass(frozen=True)
class VideoRecord:
    """One video of a split: its path and its class index."""

    path: str
    label: int


class RecordTable(Sequence):
    """The videos of a split, ``(path, label)`` per row, as arrays: a read-only sequence of
    :class:`VideoRecord` made on access (see the module docstring for why).

    Args:
        paths: the videos' paths (str or path-like), in split order.
        labels: their class indices, the same length.
    """

    __slots__ = ("_blob", "_offsets", "_digest", "labels")

    def __init__(self, paths: Iterable[str | os.PathLike], labels: Iterable[int] | np.ndarray) -> None:
        encoded = [os.fspath(p).encode(_ENCODING, _ERRORS) for p in paths]
        self.labels = np.asarray(labels if isinstance(labels, np.ndarray) else list(labels), dtype=np.int64)
        if self.labels.ndim != 1 or len(self.labels) != len(encoded):
            raise ValueError(f"RecordTable: {len(encoded)} paths but labels of shape {self.labels.shape}")
        self._offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in encoded], out=self._offsets[1:])
        self._blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self._digest: str | None = None

    @classmethod
    def of(cls, records: "RecordTable | Iterable[VideoRecord]") -> "RecordTable":
        """``records`` as a table (a table is returned as it is)."""
        if isinstance(records, RecordTable):
            return records
        records = list(records)
        return cls([r.path for r in records], [r.label for r in records])

    def __len__(self) -> int:
        return len(self.labels)

    def path(self, index: int) -> str:
        """The path of row ``index`` (negative counts from the end)."""
        index = range(len(self))[index]
        return self._blob[self._offsets[index]: self._offsets[index + 1]].tobytes().decode(_ENCODING, _ERRORS)

    def label(self, index: int) -> int:
        return int(self.labels[index])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.take(np.arange(len(self))[index])
        return VideoRecord(self.path(index), int(self.labels[index]))

    def __iter__(self) -> Iterator[VideoRecord]:
        for i in range(len(self)):
            yield VideoRecord(self.path(i), int(self.labels[i]))

    @property
    def paths(self) -> list[str]:
        """Every path, in order (a new list)."""
        data, offsets = self._blob.tobytes(), self._offsets.tolist()
        return [data[a:b].decode(_ENCODING, _ERRORS) for a, b in zip(offsets[:-1], offsets[1:])]

    def digest(self) -> str:
        """A short fingerprint of the rows: file names (not folders, so a dataset moved to
        another root keeps it) and labels, in order (12 hex digits of SHA-1)."""
        if self._digest is None:
            names = "\n".join(os.path.basename(p) for p in self.paths).encode(_ENCODING, _ERRORS)
            self._digest = hashlib.sha1(names + self.labels.tobytes()).hexdigest()[:12]
        return self._digest

    def take(self, indices: Sequence[int] | np.ndarray) -> "RecordTable":
        """The rows ``indices`` (in that order), or the rows where a boolean mask is true."""
        indices = np.asarray(indices)
        if indices.dtype == bool:
            indices = np.flatnonzero(indices)
        paths = self.paths
        return RecordTable([paths[i] for i in indices.tolist()], self.labels[indices])

    def __add__(self, other: Iterable[VideoRecord]) -> list[VideoRecord]:
        return list(self) + list(other)

    def __radd__(self, other: Iterable[VideoRecord]) -> list[VideoRecord]:
        return list(other) + list(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordTable):
            return (np.array_equal(self.labels, other.labels) and np.array_equal(self._offsets, other._offsets)
                    and np.array_equal(self._blob, other._blob))
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # a sequence that compares by value

    def __repr__(self) -> str:
        return f"RecordTable({len(self)} videos)"

    @property
    def nbytes(self) -> int:
        """Bytes held by the table's arrays."""
        return self._blob.nbytes + self._offsets.nbytes + self.labels.nbytes


def sort_paths(paths: Iterable[str]) -> list[str]:
    """``paths`` in the order of their parts (``pathlib``'s order: ``a/x`` before ``a-b/x``),
    compared as strings with the separator as the smallest character."""
    return sorted(paths, key=lambda p: p.replace(os.sep, "\0"))


def dataset_order(dataset: Any) -> dict[str, int]:
    """Each video path of ``dataset``'s records -> its place in the split (empty where the
    dataset has no records): how several processes' outputs are put back in one process's
    order. Read from a :class:`RecordTable`'s columns, no record object per video."""
    records = getattr(dataset, "records", None)
    paths = records.paths if isinstance(records, RecordTable) else [r.path for r in records or []]
    return {path: place for place, path in enumerate(paths)}


def list_files(root: str | os.PathLike, recursive: bool = True) -> list[str]:
    """The files under ``root`` as path strings (``root`` joined with the relative path), in
    :func:`sort_paths` order; names starting with ``.`` are left out, and folders reached
    through a symbolic link are not entered (as ``Path.rglob`` does). One ``os.scandir`` per
    folder: no ``stat`` per file on file systems that report the entry type."""
    root = os.fspath(root)
    found: list[str] = []
    folders = [root]
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir():
                    if recursive and not entry.is_symlink():
                        folders.append(entry.path)
                elif not entry.name.startswith("."):
                    found.append(entry.path)
    return sort_paths(found)


def missing_files(paths: Iterable[str], listings: dict[str, set[str] | None] | None = None) -> list[str]:
    """The ``paths`` that are not files (absent, or a folder), in their order: one directory
    listing per folder they are in instead of a ``stat`` per path. ``listings``: folder ->
    the names of its files, filled as folders are listed (pass the same dict to share the
    listings between calls)."""
    listings = {} if listings is None else listings
    missing = []
    for path in paths:
        head, sep, name = path.rpartition(os.sep)
        folder = head or sep or "."
        if folder not in listings:
            try:
                with os.scandir(folder) as entries:
                    listings[folder] = {e.name for e in entries if e.is_file()}
            except OSError:
                listings[folder] = None
        files = listings[folder]
        # Not in the listing: asked directly before it counts as missing (a folder that cannot
        # be listed, a name the file system matches without regard to case).
        if (files is None or name not in files) and not os.path.isfile(path):
            missing.append(path)
    return missing
