"""Importing a checkpoint of any supported layout into a :class:`TimeSformer`, adapted to the
model's geometry, with a loading report: read the file (:mod:`.io`), rename it into official
names (:mod:`.layouts`), convert it for the model (:mod:`.conversion`, a pure function that
makes every check), load it with torch's ``load_state_dict``, then initialise what the
checkpoint does not provide as the report's reasons say (fresh head, zero temporal path, DnA
negative branch by policy)."""

from __future__ import annotations

import logging
import warnings
import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dna_video.models.init import init_module
from dna_video.models.pairing import pair_stream
from dna_video.models.timesformer import TimeSformer
from dna_video.checkpoints.conversion import OfficialCheckpoint, PretrainedWeights, TargetModel, convert_checkpoint
from dna_video.models.attention.negative_init import init_negative_branch
from dna_video.checkpoints.io import CheckpointError, RawCheckpoint, read_checkpoint, unwrap_state_dict
from dna_video.checkpoints.layouts import detect_layout, infer_geometry, to_official
from dna_video.checkpoints.outcomes import FRESH_INIT, NEGATIVE_BRANCH_INIT, Outcome, Reason
from dna_video.checkpoints.load_report import LoadReport

log = logging.getLogger(__name__)

__all__ = [
    "PretrainedWeights",
    "LoadReport", "load_pretrained", "load_weights", "load_image_checkpoint", "initialise_missing", "read_official",
    "timesformer_from_checkpoint",
]


def _as_raw(source: Any, weights_only: bool | None) -> RawCheckpoint:
    if isinstance(source, RawCheckpoint):
        return source
    if isinstance(source, (str, Path)):
        return read_checkpoint(source, weights_only=weights_only)
    notes: list[str] = []
    return RawCheckpoint("<in-memory state dict>", "state dict", unwrap_state_dict(source, notes), notes=notes)


def read_official(
    source: str | Path | dict[str, Tensor] | RawCheckpoint, weights_only: bool | None = None
) -> OfficialCheckpoint:
    """Read ``source`` (a file, folder, state dict or :class:`RawCheckpoint`), detect its layout
    (errors name the file) and rename it into official names: the input of
    :func:`.conversion.convert_checkpoint`."""
    raw = _as_raw(source, weights_only)
    layout = detect_layout(raw.state_dict, where=raw.path)
    return OfficialCheckpoint(raw, layout, *to_official(raw.state_dict, layout))


def load_weights(model: TimeSformer, weights: PretrainedWeights, log_report: bool = True) -> LoadReport | None:
    """Import ``weights.source`` into ``model`` with ``weights``' choices (a run's ``model.init``);
    None when there is no source."""
    if not weights.source:
        return None
    choices = {f.name: getattr(weights, f.name) for f in dataclasses.fields(weights) if f.name != "source"}
    return load_pretrained(model, weights.source, log_report=log_report, **choices)


def _load_into(self: PretrainedWeights, model: TimeSformer, pair_seed: int | None = None) -> LoadReport | None:
    """0.2's ``PretrainedWeights.load_into(model, pair_seed=...)``: :func:`load_weights`."""
    warnings.warn("PretrainedWeights.load_into(model, pair_seed=s) is load_weights(model, weights) since "
                  "dna-video 0.3 (pair_seed a field of the weights); the method goes in 0.4",
                  DeprecationWarning, stacklevel=2)
    return load_weights(model, self if pair_seed is None else dataclasses.replace(self, pair_seed=pair_seed))


# Kept one release on the class defined with the import's choices (:mod:`.conversion`), which
# cannot import this module.
PretrainedWeights.load_into = _load_into  # type: ignore[attr-defined]


@torch.no_grad()
def load_pretrained(
    model: TimeSformer,
    source: str | Path | dict[str, Tensor] | RawCheckpoint,
    *,
    weights_only: bool | None = None,
    log_report: bool = True,
    **choices: Any,
) -> LoadReport:
    """Import ``source`` into ``model`` in place, adapted to the model's geometry.

    Args:
        model: the TimeSformer to fill (softmax or DnA attention); its class count, frame
            count and resolution are the targets.
        source: a checkpoint file or Hugging Face folder (any layout of :mod:`.layouts`), or
            a state dict already in memory.
        weights_only: see :func:`.io.read_checkpoint`.
        log_report: log the loading report table (INFO).
        choices: the import's choices, fields of :class:`PretrainedWeights` (their defaults
            are stated there), as follows.
        strict: fail, listing them, if any model tensor is not taken from the checkpoint or any
            checkpoint tensor is left unused (resampling is allowed).
        dna_init: how DnA's Q-, V- are set when the checkpoint has none: ``random``,
            ``scaled_copy`` or ``orthogonal`` (see :mod:`dna_video.models.attention.negative_init`).
        dna_init_eps: eps of ``scaled_copy``.
        negate_v_neg: negate V- on import, for checkpoints of implementations that SUBTRACT
            the negative branch (the reference's ``vit/dna.py``); ours adds it.
        pos_interpolation: ``pos_embed`` resampling: in 2-D ``bicubic`` (timm's default),
            ``bilinear`` or ``nearest`` (what the official model does at forward time); or
            ``flat_nearest``, the official TimeSformer's import (1-D nearest over the
            flattened patch sequence), to reproduce a reference model exactly.
        time_interpolation: ``time_embed`` resampling (1-D): ``linear`` or ``nearest`` (the
            official import).
        pair_seed: draw what the checkpoint lacks from random streams of this seed instead of
            the global one (:mod:`dna_video.models.pairing`): a fresh module from the stream
            ``fresh <module>`` (the same in a softmax and a DnA model), the ``dna_init`` policy's
            draws from ``dna_init <module>``; None: the global random stream.

    Returns:
        The :class:`LoadReport`.

    Raises:
        CheckpointError: not a checkpoint; an architecture, depth, head count or tensor shape
            that does not fit (naming the key and both shapes); a strict import with problems.
            The model is untouched then.
    """
    if "source" in choices:
        raise TypeError("load_pretrained: give the checkpoint as its second argument, not source=")
    options = PretrainedWeights(**choices)
    # timesformer_from_checkpoint passes the checkpoint already renamed.
    checkpoint = source if isinstance(source, OfficialCheckpoint) else read_official(source, weights_only)
    state, report = convert_checkpoint(checkpoint, TargetModel.of(model), options)
    if options.strict and report.problems():
        raise CheckpointError(
            f"strict import of {report.source} failed ({len(report.problems())} problems):\n  "
            + "\n  ".join(report.problems())
        )
    model.load_state_dict(state, strict=options.strict)
    initialise_missing(model, report, options.pair_seed)
    if log_report:
        log.info("%s", report.table())
    return report


@torch.no_grad()
def initialise_missing(model: TimeSformer, report: LoadReport, pair_seed: int | None = None) -> None:
    """Set the model tensors the checkpoint did not provide as the report's reasons say:
    zero (temporal path), a fresh module (head), a DnA policy (Q-, V-). Tensors whose reason
    is the model's own value (e.g. ``alpha_init``) are left as they are. With ``pair_seed``,
    each module's random draws come from its own stream of that seed
    (:func:`~dna_video.models.pairing.pair_stream`), not from the global one."""
    tensors = model.state_dict()
    fresh, negative = set(), {}
    for entry in report.of(Outcome.INITIALISED):
        for step in entry.steps:
            if step.reason is Reason.ZERO_START:
                tensors[entry.key].zero_()
            elif step.reason in FRESH_INIT:
                fresh.add(entry.key.rpartition(".")[0])
            elif step.reason in NEGATIVE_BRANCH_INIT:
                negative[step.fields["module"]] = step.fields
    for name in sorted(fresh):
        with pair_stream(pair_seed, f"fresh {name}"):
            init_module(model.get_submodule(name))
    for name, fields in negative.items():
        with pair_stream(pair_seed, f"dna_init {name}"):
            init_negative_branch(model.get_submodule(name), fields["policy"], eps=fields["eps"])


def timesformer_from_checkpoint(
    source: str | Path,
    *,
    weights_only: bool | None = None,
    load_kwargs: dict[str, Any] | None = None,
    **overrides: Any,
) -> tuple[TimeSformer, LoadReport]:
    """Build a TimeSformer with the checkpoint's geometry and import the checkpoint into it.

    Geometry comes from a Hugging Face ``config.json``, our Lightning hyper-parameters, or
    tensor shapes (:func:`.layouts.infer_geometry`). ``overrides`` replace any argument, e.g.
    ``num_classes=31, num_frames=16, img_size=224, attention="dna"`` for fine-tuning (the
    checkpoint is then adapted: head re-initialised, embeddings resampled, DnA branch
    initialised); ``load_kwargs`` go to :func:`load_pretrained`.
    """
    official = read_official(source, weights_only)
    raw = official.raw
    kwargs = {**infer_geometry(official.state, raw.hf_config, raw.hparams), **overrides}
    if "num_heads" not in kwargs:
        raise CheckpointError(
            f"{source}: the number of attention heads is not stored in this checkpoint "
            f"(width {kwargs.get('embed_dim')}); pass num_heads=..."
        )
    kwargs.setdefault("num_classes", 0)
    model = TimeSformer(**kwargs)
    report = load_pretrained(model, official, **(load_kwargs or {}))
    return model, report


@torch.no_grad()
def load_image_checkpoint(
    model: nn.Module,
    source: str | Path | dict[str, Tensor],
    *,
    log_report: bool = True,
    **choices: Any,
):
    """Import an image checkpoint (timm ViT, DnA-ViT with separate or fused ``qqkvv``
    projections, an image model of this package) into ``model`` in place through
    :func:`dna_video.checkpoints.convert_checkpoint`: ``pos_embed`` resampled to the model's
    grid (a zero cls entry added when the checkpoint has none), the head dropped when the
    class count differs, attention extras the checkpoint lacks initialised as the report says
    (DnA's Q-/V- by ``dna_init``). ``choices``: as :func:`load_pretrained`'s (fields of
    :class:`PretrainedWeights`; ``time_interpolation`` has nothing to act on here). Returns the
    :class:`~dna_video.checkpoints.LoadReport`."""
    checkpoint = read_official(source)
    if checkpoint.layout not in ("vit", "dna_vit_fused"):
        raise CheckpointError(
            f"{checkpoint.raw.path}: a {checkpoint.layout} checkpoint; the image model takes image ViT "
            "checkpoints (timm ViT, DnA-ViT)"
        )
    if model.cls_token is None or model.no_embed_class or model.num_reg_tokens:
        raise CheckpointError("load_image_checkpoint: the model must have a class token with a position entry")
    blocks = list(model.blocks)
    attn = blocks[0].attn
    kinds = sorted({type(b.attn).__name__ for b in blocks})  # for the description only
    target = TargetModel(
        shapes={k: tuple(v.shape) for k, v in model.state_dict().items()},
        grid=tuple(model.patch_embed.grid_size), num_frames=1, embed_dim=model.embed_dim,
        num_classes=model.num_classes, depth=len(blocks), num_heads=attn.num_heads,
        attention=getattr(blocks[0], "attention", "softmax"),
        description=f"VisionTransformer({'/'.join(kinds)}, embed_dim={model.embed_dim}, depth={len(blocks)}, "
                    f"heads={attn.num_heads}, grid={tuple(model.patch_embed.grid_size)}, classes={model.num_classes})",
    )
    options = PretrainedWeights(**choices)
    state, report = convert_checkpoint(checkpoint, target, options)
    if options.strict and report.problems():
        raise CheckpointError(f"strict import of {report.source} failed:\n  " + "\n  ".join(report.problems()))
    model.load_state_dict(state, strict=False)
    initialise_missing(model, report, options.pair_seed)
    if log_report:
        log.info("%s", report.table())
    return report
