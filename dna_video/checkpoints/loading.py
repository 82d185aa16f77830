"""Importing a checkpoint of any supported layout into a :class:`TimeSformer`, adapted to the
model's geometry, with a loading report.

Steps, in order (all checks happen before the model is touched):

1. read the file and peel wrappers (:mod:`.io`); rename / split into official names
   (:mod:`.layouts`); optionally negate V- for implementations that subtract the branch;
2. refuse checkpoints of another architecture (LayerScale, QK-norm, register tokens...),
   another depth or head count, or tensors whose shapes do not fit (naming the key and both
   shapes, and the checkpoint's geometry);
3. image checkpoints: temporal attention and ``temporal_norm1`` copied from the spatial ones
   (the official convention, DnA's ``q_neg``/``v_neg``/``neg_scalers`` included);
   ``temporal_fc`` and ``time_embed`` zero, so the video model starts as the image model;
4. ``pos_embed`` resampled in 2-D when the patch grid differs (a zero cls entry added for
   checkpoints whose cls token has no position embedding), ``time_embed`` in 1-D when the
   frame count differs; head re-initialised when the class count differs;
5. DnA negative branch absent from the checkpoint: initialised by a policy (:mod:`.dna_init`);
6. strict mode: fail, listing every tensor that is newly initialised or unused.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ..attention import DenoisingAttention
from ..timesformer import TimeSformer, init_module, resample_pos_embed, resample_time_embed
from .dna_init import DNA_INIT_POLICIES, init_negative_branch
from .io import CheckpointError, RawCheckpoint, read_checkpoint, unwrap_state_dict
from .layouts import _BLOCK_INDEX, LAYOUT_NAMES, _depth, detect_layout, infer_geometry, known_num_heads, to_official

log = logging.getLogger(__name__)

__all__ = ["LoadReport", "load_pretrained", "timesformer_from_checkpoint"]

# Parameters of architectures this TimeSformer does not implement: importing them would
# silently change the function, so they are refused rather than dropped.
UNSUPPORTED = {
    r"\.ls[12]\.(gamma|weight)$": "LayerScale",
    r"\.(q_norm|k_norm)\.": "QK normalisation",
    r"^norm_pre\.": "pre-norm before the blocks",
    r"^fc_norm\.": "global-average-pool head norm",
    r"^reg_token$": "register tokens",
    r"^dist_token$": "distillation token",
    r"^temporal_encoder\.|^temporal_embedding$": "factorised (ViViT-style) encoder",
}
_NEG_BRANCH = re.compile(r"\.(q_neg|v_neg)\.(weight|bias)$|\.neg_scalers$")


@dataclass
class LoadReport:
    """What an import did to every tensor. Keys are official TimeSformer names (this
    model's), also in ``unused`` for tensors that have one (e.g. a Hugging Face
    ``classifier.weight`` dropped for another class count shows as ``head.weight``); a
    checkpoint tensor with no official name is listed under its own name. Values say why."""

    source: str
    container: str
    layout: str
    target: str
    loaded: list[str] = field(default_factory=list)
    converted: dict[str, str] = field(default_factory=dict)
    resampled: dict[str, str] = field(default_factory=dict)
    initialised: dict[str, str] = field(default_factory=dict)
    unused: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

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


def _summary(entries: dict[str, str], limit: int = 4) -> list[str]:
    """One ``reason: key patterns`` line per reason, block indices collapsed to ``*``."""
    by_reason: dict[str, dict[str, None]] = defaultdict(dict)
    for key, why in entries.items():
        by_reason[why][_BLOCK_INDEX.sub("blocks.*.", key)] = None
    lines = []
    for why, keys in by_reason.items():
        names = list(keys)
        shown = ", ".join(names[:limit]) + (f" (+{len(names) - limit} more)" if len(names) > limit else "")
        lines.append(f"{why}: {shown}")
    return lines


def _describe(model: TimeSformer) -> str:
    attn = model.blocks[0].attn
    return (
        f"TimeSformer(attention={model.attention}, embed_dim={model.embed_dim}, depth={len(model.blocks)}, "
        f"heads={attn.num_heads}, patch={model.patch_size}, frames={model.num_frames}, "
        f"img={model.img_size}, classes={model.num_classes})"
    )


def _as_raw(source: Any, weights_only: bool | None) -> RawCheckpoint:
    if isinstance(source, RawCheckpoint):
        return source
    if isinstance(source, (str, Path)):
        return read_checkpoint(source, weights_only=weights_only)
    notes: list[str] = []
    return RawCheckpoint("<in-memory state dict>", "state dict", unwrap_state_dict(source, notes), notes=notes)


class _Official(NamedTuple):
    """A checkpoint read and converted to official names (:func:`.layouts.to_official`)."""

    raw: RawCheckpoint
    layout: str
    state: dict[str, Tensor]
    converted: dict[str, str]
    unknown: list[str]


def _official(raw: RawCheckpoint) -> _Official:
    """Detect ``raw``'s layout (errors name the file) and convert it, once per import."""
    layout = detect_layout(raw.state_dict, where=raw.path)
    return _Official(raw, layout, *to_official(raw.state_dict, layout))


def _geometry_hint(state: dict[str, Tensor], raw: RawCheckpoint, model: TimeSformer) -> str:
    try:
        geometry = infer_geometry(state, raw.hf_config, raw.hparams)
    except CheckpointError:
        return ""
    shown = {k: geometry[k] for k in ("embed_dim", "depth", "num_heads", "patch_size", "mlp_ratio", "in_chans") if k in geometry}
    return (
        f"\nThe checkpoint's geometry: {shown}.\nThe model: {_describe(model)}.\n"
        "Build the model with the checkpoint's width, depth, heads and patch size "
        "(e.g. model.arch / model.net_kwargs, or timesformer_from_checkpoint)."
    )


def _grid_of(pos_embed: Tensor) -> tuple[int, int]:
    n = pos_embed.shape[1] - 1
    side = math.isqrt(n)
    if side * side != n:
        raise CheckpointError(f"pos_embed: {n} patch positions do not form a square grid; cannot resample it")
    return side, side


@torch.no_grad()
def load_pretrained(
    model: TimeSformer,
    source: str | Path | dict[str, Tensor] | RawCheckpoint,
    *,
    strict: bool = False,
    dna_init: str = "random",
    dna_init_eps: float = 1e-4,
    negate_v_neg: bool = False,
    pos_interpolation: str = "bicubic",
    time_interpolation: str = "linear",
    weights_only: bool | None = None,
    log_report: bool = True,
) -> LoadReport:
    """Import ``source`` into ``model`` in place, adapted to the model's geometry.

    Args:
        model: the TimeSformer to fill (softmax or DnA attention); its class count, frame
            count and resolution are the targets.
        source: a checkpoint file or Hugging Face folder (any layout of :mod:`.layouts`), or
            a state dict already in memory.
        strict: fail, listing them, if any model tensor is not taken from the checkpoint or any
            checkpoint tensor is left unused (resampling is allowed).
        dna_init: how DnA's Q-, V- are set when the checkpoint has none: ``random``,
            ``scaled_copy`` or ``orthogonal`` (see :mod:`.dna_init`).
        dna_init_eps: eps of ``scaled_copy``.
        negate_v_neg: negate V- on import, for checkpoints of implementations that SUBTRACT
            the negative branch (the reference's ``vit/dna.py``); ours adds it.
        pos_interpolation: ``pos_embed`` resampling (2-D): ``bicubic`` (timm's default),
            ``bilinear`` or ``nearest`` (what the official model does at forward time).
        time_interpolation: ``time_embed`` resampling (1-D): ``linear`` or ``nearest``.
        weights_only: see :func:`.io.read_checkpoint`.
        log_report: log the loading report table (INFO).

    Returns:
        The :class:`LoadReport`.

    Raises:
        CheckpointError: not a checkpoint; an architecture, depth, head count or tensor shape
            that does not fit (naming the key and both shapes); a strict import with problems.
    """
    if dna_init not in DNA_INIT_POLICIES:
        raise ValueError(f"unknown dna_init {dna_init!r}; choose one of {list(DNA_INIT_POLICIES)}")
    if time_interpolation not in ("linear", "nearest"):
        raise ValueError(f"unknown time_interpolation {time_interpolation!r}; choose linear or nearest")
    # timesformer_from_checkpoint passes the checkpoint already converted (an _Official).
    raw, layout, state, converted, unknown = (
        source if isinstance(source, _Official) else _official(_as_raw(source, weights_only))
    )
    report = LoadReport(raw.path, raw.container, layout, _describe(model), notes=list(raw.notes))
    report.unused.update({k: "no official TimeSformer name" for k in unknown})
    target = model.state_dict()

    # -- refuse what cannot fit ------------------------------------------------------------
    foreign = {k: what for k in state for pattern, what in UNSUPPORTED.items() if re.search(pattern, k)}
    if foreign:
        listed = "; ".join(f"{k} ({what})" for k, what in list(foreign.items())[:8])
        raise CheckpointError(f"{raw.path}: parts this TimeSformer does not implement: {listed}")
    problems = []
    depth = _depth(state)
    if depth != len(model.blocks):
        problems.append(f"depth: {depth} blocks in the checkpoint, {len(model.blocks)} in the model")
    heads = known_num_heads(state, raw.hf_config, raw.hparams)
    if heads is not None and heads != model.blocks[0].attn.num_heads:
        problems.append(f"num_heads: {heads} in the checkpoint, {model.blocks[0].attn.num_heads} in the model")

    if negate_v_neg:
        for k in [k for k in state if re.search(r"\.v_neg\.(weight|bias)$", k)]:
            state[k] = -state[k]
            converted[k] = "negated (the checkpoint subtracts the negative branch)"

    # -- image checkpoints: the temporal path starts as a copy of the spatial one --------
    for key in target:
        spatial = key.replace(".temporal_attn.", ".attn.").replace(".temporal_norm1.", ".norm1.")
        if spatial != key and key not in state and spatial in state:
            state[key] = state[spatial]
            converted[key] = "copied from the spatial " + ("attention" if ".temporal_attn." in key else "norm1")

    # -- embeddings: resample to the model's grid and frame count ------------------------
    if "pos_embed" in state and state["pos_embed"].ndim == 3 and state["pos_embed"].shape[-1] == model.embed_dim:
        pos = state["pos_embed"].float()
        n = pos.shape[1]
        if n > 1 and math.isqrt(n) ** 2 == n:
            # Only patch positions: that cls token had no position embedding (DnA-ViT, DeiT-III).
            pos = torch.cat([pos.new_zeros(1, 1, pos.shape[-1]), pos], dim=1)
            converted["pos_embed"] = "zero cls entry added (the checkpoint's cls token has no position embedding)"
        grid = _grid_of(pos)
        if grid != model.grid:
            pos = resample_pos_embed(pos, model.grid, grid, pos_interpolation)
            report.resampled["pos_embed"] = f"grid {grid[0]}x{grid[1]} -> {model.grid[0]}x{model.grid[1]} ({pos_interpolation})"
        state["pos_embed"] = pos
    if "time_embed" in state and state["time_embed"].ndim == 3 and state["time_embed"].shape[1] != model.num_frames:
        t_src = state["time_embed"].shape[1]
        state["time_embed"] = resample_time_embed(state["time_embed"].float(), model.num_frames, time_interpolation)
        report.resampled["time_embed"] = f"{t_src} -> {model.num_frames} frames ({time_interpolation})"

    # -- head: dropped when the class count differs --------------------------------------
    head_reason = "not in the checkpoint"
    if "head.weight" in state:
        k_src = state["head.weight"].shape[0]
        if model.num_classes == 0 or k_src != model.num_classes:
            head_reason = f"classes differ: {k_src} in the checkpoint, {model.num_classes} here"
            for k in ("head.weight", "head.bias"):
                if k in state:
                    report.unused[k] = head_reason
                    del state[k]

    # -- shapes ------------------------------------------------------------------------------
    for key, value in state.items():
        if key in target and value.shape != target[key].shape:
            problems.append(f"{key}: checkpoint {tuple(value.shape)}, model {tuple(target[key].shape)}")
    if problems:
        raise CheckpointError(
            f"{raw.path} does not fit the model:\n  " + "\n  ".join(problems) + _geometry_hint(state, raw, model)
        )

    # -- what is used, what is not ------------------------------------------------------------
    for key in state:
        if key in target:
            if key in report.resampled:
                if key in converted:
                    report.resampled[key] += f", {converted[key]}"
                continue
            if key in converted:
                report.converted[key] = converted[key]
            else:
                report.loaded.append(key)
        elif _NEG_BRANCH.search(key) and model.attention != "dna":
            report.unused[key] = f"negative branch: the model uses {model.attention} attention"
        else:
            report.unused[key] = "not a parameter of this model"
    negative_missing = set()
    for name, attn in model.attention_modules().items():
        if isinstance(attn, DenoisingAttention):
            missing = [f"{name}.{p}.weight" not in state for p in ("q_neg", "v_neg")]
            if any(missing) and not all(missing):
                raise CheckpointError(f"{raw.path}: {name} has only one of q_neg / v_neg")
            if all(missing):
                negative_missing.add(name)
    for key in target:
        if key in state:
            continue
        if key.startswith("head."):
            why = f"re-initialised ({head_reason})"
        elif key == "time_embed" or ".temporal_fc." in key:
            why = "zero (the temporal path starts as the identity)"
        elif re.search(r"\.(q_neg|v_neg)\.", key):
            why = f"dna_init={dna_init}" + (f" (eps {dna_init_eps:g})" if dna_init == "scaled_copy" else "")
        elif key.endswith(".neg_scalers"):
            why = "alpha_init (the model's initial alpha)"
        else:
            why = "not in the checkpoint: the model's own initialisation"
        report.initialised[key] = why

    if strict and report.problems():
        raise CheckpointError(
            f"strict import of {raw.path} failed ({len(report.problems())} problems):\n  "
            + "\n  ".join(report.problems())
        )

    # -- apply -----------------------------------------------------------------------------
    for key, value in state.items():
        if key in target:
            target[key].copy_(value.to(dtype=target[key].dtype, device=target[key].device))
    for key, why in report.initialised.items():
        if why.startswith("zero"):
            target[key].zero_()
    if any(k.startswith("head.") for k in report.initialised) and isinstance(model.head, nn.Linear):
        init_module(model.head)
    for name in negative_missing:
        init_negative_branch(model.get_submodule(name), dna_init, eps=dna_init_eps)

    if log_report:
        log.info("%s", report.table())
    return report


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
    official = _official(read_checkpoint(source, weights_only=weights_only))
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
