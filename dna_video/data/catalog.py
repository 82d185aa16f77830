"""Every file found under a dataset root, sorted into splits or left out with a reason.

Built once per root and protocol by the dataset's own rules (:func:`~.smarthome.smarthome_catalog`,
:func:`~.ntu.ntu_catalog`) from one listing of the root; the splits are :class:`~.records.RecordTable`
arrays, filled a split at a time (:meth:`Catalog.add_many`), so that a root of 56,880 files is
sorted in a fraction of a second (benchmarks/README.md, "Full-size datasets").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dna_video.data.records import RecordTable, VideoRecord

log = logging.getLogger(__name__)

__all__ = ["Catalog", "SplitRecords", "examples"]


@dataclass
class SplitRecords:
    """What :meth:`~.datamodule.VideoDataModule.build_split` found: the split's videos (a list
    of :class:`~.records.VideoRecord` or a :class:`~.records.RecordTable`) and the files left
    out of it, by reason (reason -> paths), so that nothing is dropped without a count."""

    records: Sequence[VideoRecord]
    excluded: dict[str, list[str]] = field(default_factory=dict)


def examples(paths: Sequence[str], k: int = 3) -> str:
    """The first ``k`` of ``paths`` and how many more, for a log line or an error."""
    shown = ", ".join(str(p) for p in paths[:k])
    return shown + (f" (+{len(paths) - k} more)" if len(paths) > k else "")


class Catalog:
    """Every file found under a dataset root, sorted into splits or left out with a reason.

    Reasons in ``strict_reasons`` (a malformed name, an unknown activity...) are errors in
    strict mode; the others (a class outside the protocol, a camera the protocol does not
    use) are part of the protocol and only counted. ``foreign_reasons`` mark files that are
    not videos of the dataset at all (another file type, a malformed name).
    """

    def __init__(self, name: str, strict_reasons: Sequence[str] = (), foreign_reasons: Sequence[str] = ()) -> None:
        self.name = name
        self.strict_reasons = tuple(strict_reasons)
        self.foreign_reasons = tuple(foreign_reasons)
        # split -> chunks of (paths, labels), joined into one table when read
        self._chunks: dict[str, list[tuple[list[str], np.ndarray]]] = {}
        self._tables: dict[str, RecordTable] = {}
        # split (None: the file belongs to no split) -> reason -> paths
        self.excluded: dict[str | None, dict[str, list[str]]] = {}
        self.notes: list[str] = []  # facts about the splits, logged with the summary

    def add(self, split: str, record: VideoRecord) -> None:
        """One video into ``split`` (:meth:`add_many` for many)."""
        self.add_many(split, [record.path], np.array([record.label]))

    def add_many(self, split: str, paths: Sequence[str], labels: Sequence[int] | np.ndarray) -> None:
        """Videos into ``split``, after those already there."""
        self._tables.pop(split, None)
        self._chunks.setdefault(split, []).append((list(paths), np.asarray(labels, dtype=np.int64)))

    def set_split(self, split: str, records: RecordTable, excluded: dict[str, list[str]] | None = None) -> None:
        """``split`` holds exactly ``records`` (e.g. a validation split that is the test split)."""
        self._chunks[split] = []
        self._tables[split] = records
        if excluded is not None:
            self.excluded[split] = {reason: list(paths) for reason, paths in excluded.items()}

    @property
    def records(self) -> dict[str, RecordTable]:
        """split -> its videos."""
        for split, chunks in self._chunks.items():
            if split not in self._tables:
                paths = [p for chunk, _ in chunks for p in chunk]
                labels = np.concatenate([labels for _, labels in chunks]) if chunks else np.zeros(0, np.int64)
                self._tables[split] = RecordTable(paths, labels)
        return dict(self._tables)

    def exclude(self, split: str | None, reason: str, path: str) -> None:
        self.excluded.setdefault(split, {}).setdefault(reason, []).append(path)

    def exclude_many(self, split: str | None, reason: str, paths: Iterable[str]) -> None:
        paths = list(paths)
        if paths:
            self.excluded.setdefault(split, {}).setdefault(reason, []).extend(paths)

    def excluded_by_reason(self) -> dict[str, list[str]]:
        """Every excluded file, whatever its split, by reason (each file once)."""
        out: dict[str, dict[str, None]] = {}
        for reasons in self.excluded.values():
            for reason, paths in reasons.items():
                out.setdefault(reason, {}).update(dict.fromkeys(paths))
        return {reason: list(paths) for reason, paths in out.items()}

    def excluded_counts(self) -> dict[str, int]:
        """How many files were left out, by reason (each file once)."""
        return {reason: len(paths) for reason, paths in self.excluded_by_reason().items()}

    def split(self, split: str) -> SplitRecords:
        records = self.records.get(split) or RecordTable([], [])
        return SplitRecords(records, dict(self.excluded.get(split, {})))

    def raise_if_strict(self, strict: bool) -> None:
        bad = {r: p for r, p in self.excluded_by_reason().items() if r in self.strict_reasons}
        if strict and bad:
            raise ValueError(
                f"{self.name}: strict mode: "
                + "; ".join(f"{len(p)} file(s) with {r}: {examples(p)}" for r, p in bad.items())
                + ". Remove or rename them, or set strict=false to leave them out with a count."
            )

    def log_summary(self, root: str) -> None:
        total = len({p for records in self.records.values() for p in records.paths})
        excluded = self.excluded_by_reason()
        text = f"{self.name}: {total} videos in splits under {root}"
        if excluded:
            text += f"; {sum(len(p) for p in excluded.values())} files left out:"
        for reason, paths in excluded.items():
            text += f"\n    {len(paths)} {reason} (e.g. {examples(paths, 2)})"
        log.info(text)
        for note in self.notes:
            log.info("%s: %s", self.name, note)
