"""Where a model's weights come from, and under which licence: the weights a run started from,
followed back through this project's own checkpoints to random initialisation or an outside
source, whose licence is stated as far as it is known
(:func:`dna_video.checkpoints.sources.weights_licence`). The model card's section on weights
and licences (:mod:`.card`).

No torch at import: reading a checkpoint back imports it then.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dna_video.checkpoints.sources import WeightsLicence

__all__ = ["MAX_HISTORY", "Origin", "init_source", "weights_history", "licence_lines"]

# How far the history follows checkpoints of this project back to their starting weights.
MAX_HISTORY = 8


def init_source(state: dict[str, Any], hparams: dict[str, Any]) -> str | None:
    """The weights a checkpoint's run started from: ``initialised_from`` (where the task records
    them on saving), else the import still in the hyper-parameters (video ``init.source``,
    image ``init_from``); None: random initialisation."""
    return state.get("initialised_from") or (hparams.get("init") or {}).get("source") or hparams.get("init_from")


@dataclass(frozen=True)
class Origin:
    """One step back in a model's weights: ``source`` (None: random initialisation), whether it
    is a checkpoint of this project read here (``ours``), and the licence known of an outside
    source."""

    source: str | None
    ours: bool = False
    licence: WeightsLicence | None = None


def _read_ours(path: Path) -> dict[str, Any] | None:
    """The checkpoint at ``path`` when it is one of this project's (a Lightning ``.ckpt`` with
    hyper-parameters) that reads here; None otherwise."""
    from dna_video.checkpoints.io import CheckpointError, load_torch_file

    # Runs write Lightning's .ckpt; any other file is someone else's format.
    if path.suffix != ".ckpt" or not path.is_file():
        return None
    try:
        state = load_torch_file(path, weights_only=None)
    except CheckpointError:
        return None
    return state if isinstance(state, dict) and "hyper_parameters" in state else None


def weights_history(source: str | None) -> list[Origin]:
    """The weights a run started from, then (for a checkpoint of this project found on this
    machine) what that checkpoint's run started from, and so on: ends with random
    initialisation, an outside source (with its licence, :func:`weights_licence`) or a
    checkpoint that cannot be read here (licence unknown)."""
    from dna_video.checkpoints.sources import weights_licence
    from dna_video.checkpoints.upgrade import upgrade_checkpoint

    history: list[Origin] = []
    seen: set[Path] = set()
    while source is not None and len(history) < MAX_HISTORY:
        path = Path(source)
        state = None if path.resolve() in seen else _read_ours(path)
        if state is None:
            history.append(Origin(source, licence=weights_licence(source)))
            return history
        seen.add(path.resolve())
        history.append(Origin(source, ours=True))
        source = init_source(state, upgrade_checkpoint(state)["hyper_parameters"])
    if source is None:
        history.append(Origin(None))
    else:  # a loop or a longer history than followed: the rest is not known here
        history.append(Origin(source, licence=weights_licence(source)))
    return history


def _origin_line(origin: Origin) -> str:
    if origin.source is None:
        return "random initialisation: no one else's weights."
    if origin.ours:
        return f"`{origin.source}`, a checkpoint of this project (read here); it started from:"
    licence = origin.licence
    if licence.licence is None:
        who = "" if licence.publisher == "unknown" else f"{licence.publisher}; "
        return f"`{origin.source}`: {who}licence unknown: {licence.terms}."
    return f"`{origin.source}`: {licence.publisher}, licence {licence.licence}: {licence.terms}."


def _licence_verdict(history: list[Origin], dataset: str | None) -> str:
    """What the history means for using the model: the first non-commercial licence in it,
    else the first unknown one, else only its training data's terms."""
    restricted = [o for o in history if o.licence is not None and o.licence.non_commercial]
    unknown = [o for o in history if o.licence is not None and o.licence.licence is None]
    if restricted:
        first = restricted[0]
        return (
            f"This model is made from {first.licence.licence} weights, those of {first.licence.publisher}: "
            "like them, it may be used and shared for non-commercial purposes only, with attribution; the "
            "Apache-2.0 licence of the code does not extend to these weights."
        )
    if unknown:
        return (
            f"The licence of this model's weights follows that of `{unknown[0].source}`, which dna-video "
            "does not know: check it before publishing or using this model."
        )
    return (
        "No one else's weights are in this model: it was trained from random initialisation"
        + (" (through this project's own checkpoints)" if len(history) > 1 else "")
        + ". The terms of use of its training data" + (f" ({dataset})" if dataset else "")
        + " may still restrict its use: check them."
    )


def licence_lines(history: list[Origin], dataset: str | None) -> list[str]:
    """The model card's section "Weights and licences" (Markdown lines) for ``history``
    (:func:`weights_history`) of a model trained on ``dataset`` (a name, or None)."""
    lines = [
        "## Weights and licences",
        "",
        "dna-video's code is Apache-2.0; it implements the TimeSformer and DnA "
        "methods from their papers and contains no code of their reference repositories (the NOTICE "
        "file says what it owes to whom). The licence of weights stays with the weights.",
        "",
        "Where this model's weights come from:",
        "",
    ]
    lines += [f"{'  ' * i}- {_origin_line(origin)}" for i, origin in enumerate(history)]
    return lines + ["", _licence_verdict(history, dataset)]
