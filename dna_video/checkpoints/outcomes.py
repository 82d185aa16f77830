"""What an import does to each tensor, as data: an :class:`Outcome`, and the :class:`Step`\\ s
(a :class:`Reason` with its fields) that led to it. The report's text is rendered from these;
the model-side initialisations after loading read the reasons, never the text."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["Outcome", "Reason", "Step", "Entry", "RESAMPLING", "FRESH_INIT", "NEGATIVE_BRANCH_INIT"]


class Outcome(Enum):
    """What became of one tensor (a row of the report's table)."""

    LOADED = "loaded"  # taken from the checkpoint as it is
    CONVERTED = "converted"  # taken after renaming, splitting, copying or negating
    RESAMPLED = "resampled"  # taken after resampling to the model's grid / frame count
    INITIALISED = "initialised"  # a model tensor the checkpoint does not provide
    UNUSED = "unused"  # a checkpoint tensor the model does not take


class Reason(Enum):
    """Why; the value is the report's text, formatted with the step's fields."""

    # converted
    RENAMED_FROM_HF = "renamed from Hugging Face names"
    SPLIT_FROM_FUSED = "split from fused {source}"
    NEGATED = "negated (the checkpoint subtracts the negative branch)"
    COPIED_FROM_SPATIAL = "copied from the spatial {part}"
    CLS_POSITION_ADDED = "zero cls entry added (the checkpoint's cls token has no position embedding)"
    # resampled
    GRID_RESAMPLED = "grid {old[0]}x{old[1]} -> {new[0]}x{new[1]} ({mode})"
    FRAMES_RESAMPLED = "{old} -> {new} frames ({mode})"
    # initialised
    HEAD_CLASSES_DIFFER = "re-initialised (classes differ: {checkpoint} in the checkpoint, {model} here)"
    HEAD_ABSENT = "re-initialised (not in the checkpoint)"
    ZERO_START = "zero (the temporal path starts as the identity)"
    DNA_INIT = "dna_init={policy}"
    DNA_INIT_SCALED = "dna_init={policy} (eps {eps:g})"
    ALPHA_INIT = "alpha_init (the model's initial alpha)"
    OWN_INIT = "{how}"  # an attention kind's own parameter, in the kind's words
    MODEL_INIT = "not in the checkpoint: the model's own initialisation"
    # unused
    CLASSES_DIFFER = "classes differ: {checkpoint} in the checkpoint, {model} here"
    NO_OFFICIAL_NAME = "no official TimeSformer name"
    OTHER_ATTENTION = "{part}: the model uses {attention} attention"
    NOT_IN_MODEL = "not a parameter of this model"


RESAMPLING = frozenset({Reason.GRID_RESAMPLED, Reason.FRAMES_RESAMPLED})
# Model tensors set afresh by their module's own initialisation after loading.
FRESH_INIT = frozenset({Reason.HEAD_CLASSES_DIFFER, Reason.HEAD_ABSENT})
# Q-, V- set by a DnA initialisation policy (fields: policy, eps, module).
NEGATIVE_BRANCH_INIT = frozenset({Reason.DNA_INIT, Reason.DNA_INIT_SCALED})


@dataclass(frozen=True)
class Step:
    """One reason with its fields, e.g. ``Step(Reason.FRAMES_RESAMPLED, {"old": 4, "new": 8,
    "mode": "linear"})``."""

    reason: Reason
    fields: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.reason.value.format(**self.fields)


@dataclass(frozen=True)
class Entry:
    """The outcome of one tensor: a model key, or for unused tensors the checkpoint's key
    (its official name where it has one)."""

    key: str
    outcome: Outcome
    steps: tuple[Step, ...] = ()

    @property
    def reasons(self) -> set[Reason]:
        return {s.reason for s in self.steps}

    def __str__(self) -> str:
        # Resampling first: it is what the row is about; conversions before it follow.
        return ", ".join(str(s) for s in sorted(self.steps, key=lambda s: s.reason not in RESAMPLING))
