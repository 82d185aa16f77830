"""The loading report: one :class:`.outcomes.Entry` per tensor, read as dicts of text per
outcome (``report.unused["head.weight"]``), as the list of what a strict import refuses, or
as a short table."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from dna_video.checkpoints.layouts import LAYOUT_NAMES
from dna_video.checkpoints.outcomes import Entry, Outcome

__all__ = ["LoadReport"]


@dataclass
class LoadReport:
    """What an import did to every tensor. Keys are official TimeSformer names (this
    model's), also in ``unused`` for tensors that have one (e.g. a Hugging Face
    ``classifier.weight`` dropped for another class count shows as ``head.weight``); a
    checkpoint tensor with no official name is listed under its own name.

    ``entries`` hold the outcomes as data (:class:`.outcomes.Entry`); the properties
    ``loaded``, ``converted``, ``resampled``, ``initialised``, ``unused`` give their keys and
    text per outcome."""

    source: str
    container: str
    layout: str
    target: str
    entries: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def of(self, outcome: Outcome) -> list[Entry]:
        return [e for e in self.entries if e.outcome is outcome]

    def _texts(self, outcome: Outcome) -> dict[str, str]:
        return {e.key: str(e) for e in self.of(outcome)}

    @property
    def loaded(self) -> list[str]:
        return [e.key for e in self.of(Outcome.LOADED)]

    @property
    def converted(self) -> dict[str, str]:
        return self._texts(Outcome.CONVERTED)

    @property
    def resampled(self) -> dict[str, str]:
        return self._texts(Outcome.RESAMPLED)

    @property
    def initialised(self) -> dict[str, str]:
        return self._texts(Outcome.INITIALISED)

    @property
    def unused(self) -> dict[str, str]:
        return self._texts(Outcome.UNUSED)

    def problems(self) -> list[str]:
        """Everything a strict import refuses: tensors not taken from the checkpoint, and
        checkpoint tensors left unused."""
        return [f"newly initialised {k} ({why})" for k, why in self.initialised.items()] + [
            f"unused {k} ({why})" for k, why in self.unused.items()
        ]

    def table(self) -> str:
        """A short table: one row per outcome, one line per reason, keys grouped over blocks
        (``blocks.*``)."""
        rows = [
            ("loaded", len(self.loaded), []),
            ("converted", len(self.converted), _summary(self.converted)),
            ("resampled", len(self.resampled), [f"{k}: {why}" for k, why in self.resampled.items()]),
            ("initialised", len(self.initialised), _summary(self.initialised)),
            ("unused", len(self.unused), _summary(self.unused)),
        ]
        lines = [
            f"Checkpoint import: {self.source}",
            f"  {self.container}; layout: {LAYOUT_NAMES.get(self.layout, self.layout)}"
            + (f" ({'; '.join(self.notes)})" if self.notes else ""),
            f"  into {self.target}",
            f"  {'outcome':<12}{'tensors':>8}  details",
        ]
        pad = " " * 24
        for name, count, details in rows:
            lines.append(f"  {name:<12}{count:>8}  {details[0] if details else ''}".rstrip())
            lines += [pad + d for d in details[1:]]
        return "\n".join(lines)


_BLOCK_INDEX_ANYWHERE = re.compile(r"\bblocks\.\d+\.")


def _summary(entries: dict[str, str], limit: int = 4) -> list[str]:
    """One ``reason: key patterns`` line per reason, block indices collapsed to ``*`` (in the
    keys and in reasons that name a key, e.g. ``split from fused blocks.*.attn.qqkvv.weight``)."""
    by_reason: dict[str, dict[str, None]] = defaultdict(dict)
    for key, why in entries.items():
        by_reason[_BLOCK_INDEX_ANYWHERE.sub("blocks.*.", why)][_BLOCK_INDEX_ANYWHERE.sub("blocks.*.", key)] = None
    lines = []
    for why, keys in by_reason.items():
        names = list(keys)
        shown = ", ".join(names[:limit]) + (f" (+{len(names) - limit} more)" if len(names) > limit else "")
        lines.append(f"{why}: {shown}")
    return lines
