"""Checkpoint conversion, a pure function in timm's manner (``checkpoint_filter_fn``): a
checkpoint in official names and a description of the target model in; the state dict to
load (the model's keys, the model's shapes) and the report, as data, out. Nothing here
touches a model: loading is torch's ``load_state_dict`` (:mod:`.loading`).

Steps, in order (every check before anything is returned):

1. refuse checkpoints of another architecture (LayerScale, QK-norm, register tokens...),
   another depth or head count;
2. optionally negate V- (implementations that subtract the negative branch);
3. temporal path of image checkpoints copied from the spatial one;
4. ``pos_embed`` given a cls entry when it has none and resampled to the model's grid,
   ``time_embed`` resampled to its frame count;
5. a head of another class count dropped;
6. refuse tensors whose shapes do not fit (naming the key and both shapes);
7. every model tensor the checkpoint does not provide gets a reason that says how it starts
   (zero, a DnA policy, a fresh head, the model's own value): :func:`.loading.load_pretrained`
   acts on those reasons after loading.

The facts these steps rely on are stated in :mod:`.layouts`.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from dna_video.models.timesformer import TimeSformer, resample_pos_embed, resample_time_embed
from dna_video.models.attention.negative_init import DNA_INIT_POLICIES
from dna_video.checkpoints.io import CheckpointError, RawCheckpoint
from dna_video.checkpoints.layouts import (
    SUBTRACTED_BRANCH,
    UNSUPPORTED,
    ZERO_AT_START,
    _depth,
    add_cls_position,
    attention_extra,
    infer_geometry,
    known_num_heads,
    lacks_cls_position,
    spatial_source,
)
from dna_video.checkpoints.outcomes import NEGATIVE_BRANCH_INIT, RESAMPLING, Entry, Outcome, Reason, Step
from dna_video.checkpoints.load_report import LoadReport

__all__ = [
    "PretrainedWeights",
    "OfficialCheckpoint",
    "TargetModel",
    "convert_checkpoint",
    "resample_pos_embed_flat",
    "POS_INTERPOLATIONS",
]

# ``flat_nearest``: the official TimeSformer's (and the DnA reference's) import-time quirk,
# see :func:`resample_pos_embed_flat`.
POS_INTERPOLATIONS = ("bicubic", "bilinear", "nearest", "flat_nearest")
TIME_INTERPOLATIONS = ("linear", "nearest")


@dataclass
class PretrainedWeights:
    """Where a model's weights start and how an import adapts them: a fine-tuning run's
    ``model.init``, and the choices of every import (:func:`convert_checkpoint`,
    :func:`.loading.load_pretrained`, which says more of each).

    Args:
        source: checkpoint to initialise the network from, in any supported layout (timm ViT,
            official TimeSformer ``.pyth``, DnA reference or DnA-ViT, Hugging Face folder or state
            dict, this project's ``.ckpt``; a local path, a Hugging Face Hub id such as
            ``facebook/timesformer-base-finetuned-k400``, or a URL, fetched once into the standard
            cache), adapted to the model: head re-initialised when the class count differs,
            ``time_embed`` / ``pos_embed`` resampled when the frame count / resolution differs.
            Not a resume: that is ``--ckpt_path``. null: the model's own initialisation.
        strict: fail unless every tensor of the network comes from ``source`` and every tensor of
            ``source`` is used.
        dna_init: DnA's Q-, V- when ``source`` has none: ``random`` (the reference),
            ``scaled_copy`` (eps * Q+, eps * V+) or ``orthogonal`` (V- orthogonal to V+ per head).
        dna_init_eps: eps of ``scaled_copy``.
        negate_v_neg: negate V- (checkpoints of implementations that subtract the negative branch).
        pos_interpolation: ``pos_embed`` resampling (``bicubic``, ``bilinear``, ``nearest``, ``flat_nearest``).
        time_interpolation: ``time_embed`` resampling (``linear``, ``nearest``).
        pair_seed: paired initialisation (``docs/variants.md``, "Paired runs"): the network's
            tensors that softmax attention's network of the same architecture also has start
            equal to that network's at this seed, the attention kind's extras (Q-, V-, alpha,
            lambda...) come from their own stream of it, and so do the draws of an import
            (fresh head, ``dna_init``); nothing depends on the global random state.
            null: the usual initialisation from the global random stream.
    """

    source: str | None = None
    strict: bool = False
    dna_init: str = "random"
    dna_init_eps: float = 1e-4
    negate_v_neg: bool = False
    pos_interpolation: str = "bicubic"
    time_interpolation: str = "linear"
    pair_seed: int | None = None

    def __post_init__(self) -> None:
        # jsonargparse hands a `null` given on the command line over a config's path as the
        # string "None" (nested options of a class_path's init_args).
        if self.source in ("None", "null", ""):
            self.source = None
        if self.dna_init not in DNA_INIT_POLICIES:
            raise ValueError(f"unknown dna_init {self.dna_init!r}; choose one of {list(DNA_INIT_POLICIES)}")
        if self.pos_interpolation not in POS_INTERPOLATIONS:
            raise ValueError(
                f"unknown pos_interpolation {self.pos_interpolation!r}; choose one of {list(POS_INTERPOLATIONS)}"
            )
        if self.time_interpolation not in TIME_INTERPOLATIONS:
            raise ValueError(f"unknown time_interpolation {self.time_interpolation!r}; choose linear or nearest")


def __getattr__(name: str) -> type:
    # 0.2's name of the import choices, now fields of PretrainedWeights; goes in 0.4.
    if name == "ImportOptions":
        warnings.warn("dna_video.checkpoints.conversion.ImportOptions is PretrainedWeights since dna-video 0.3 "
                      "(its fields and errors unchanged); the old name goes in 0.4", DeprecationWarning, stacklevel=2)
        return PretrainedWeights
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class OfficialCheckpoint(NamedTuple):
    """A checkpoint read and renamed into official names (:func:`.layouts.to_official`)."""

    raw: RawCheckpoint
    layout: str
    state: dict[str, Tensor]
    renamed: dict[str, Step]  # official key -> how it was renamed / split
    unknown: list[str]  # checkpoint keys with no official name


@dataclass(frozen=True)
class TargetModel:
    """What a conversion needs to know of the model: its tensors' names and shapes (which
    decide what is needed) and its geometry."""

    shapes: dict[str, tuple[int, ...]]
    grid: tuple[int, int]
    num_frames: int
    embed_dim: int
    num_classes: int
    depth: int
    num_heads: int
    attention: str
    description: str

    @classmethod
    def of(cls, model: TimeSformer) -> TargetModel:
        heads = model.blocks[0].attn.num_heads
        description = (
            f"TimeSformer(attention={model.attention}, embed_dim={model.embed_dim}, depth={len(model.blocks)}, "
            f"heads={heads}, patch={model.patch_size}, frames={model.num_frames}, "
            f"img={model.img_size}, classes={model.num_classes})"
        )
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        return cls(shapes, tuple(model.grid), model.num_frames, model.embed_dim, model.num_classes,
                   len(model.blocks), heads, model.attention, description)


def resample_pos_embed_flat(pos_embed: Tensor, num_patches: int) -> Tensor:
    """``pos_embed`` (1, 1 + N, D) resampled the way the official TimeSformer's loader does:
    the patch entries as one flattened sequence of N, nearest-interpolated in 1-D to
    ``num_patches`` (so the grid's rows are not respected), the cls entry kept as is."""
    cls, patches = pos_embed[:, :1], pos_embed[:, 1:]
    resampled = F.interpolate(rearrange(patches, "1 n d -> 1 d n"), size=num_patches, mode="nearest")
    return torch.cat([cls, rearrange(resampled, "1 d n -> 1 n d")], dim=1)


def convert_checkpoint(
    checkpoint: OfficialCheckpoint, target: TargetModel, options: PretrainedWeights | None = None
) -> tuple[dict[str, Tensor], LoadReport]:
    """``checkpoint`` converted for ``target``: the state dict to load (model keys and shapes
    only; what the model needs and the checkpoint lacks is absent) and the report. ``options``:
    the import's choices (its ``source`` is not read; None: the defaults).

    Raises:
        CheckpointError: an architecture, depth, head count or tensor shape that does not fit
            (naming the file, the key and both shapes).
    """
    options = options or PretrainedWeights()
    raw = checkpoint.raw
    state = dict(checkpoint.state)
    steps: dict[str, list[Step]] = defaultdict(list, {k: [s] for k, s in checkpoint.renamed.items()})

    foreign = {k: what for k in state for pattern, what in UNSUPPORTED.items() if re.search(pattern, k)}
    if foreign:
        listed = "; ".join(f"{k} ({what})" for k, what in list(foreign.items())[:8])
        raise CheckpointError(f"{raw.path}: parts this TimeSformer does not implement: {listed}")
    problems = _geometry_problems(state, raw, target)

    if options.negate_v_neg:
        for key in [k for k in state if SUBTRACTED_BRANCH.search(k)]:
            state[key] = -state[key]
            steps[key].append(Step(Reason.NEGATED))
    for key in target.shapes:
        source = spatial_source(key)
        if key not in state and source is not None and source[0] in state:
            state[key] = state[source[0]]
            steps[key].append(Step(Reason.COPIED_FROM_SPATIAL, {"part": source[1]}))
    _adapt_embeddings(state, steps, target, options, raw.path)
    head_dropped = _drop_head_of_other_classes(state, target)

    problems += [
        f"{key}: checkpoint {tuple(value.shape)}, model {target.shapes[key]}"
        for key, value in state.items()
        if key in target.shapes and tuple(value.shape) != target.shapes[key]
    ]
    if problems:
        raise CheckpointError(
            f"{raw.path} does not fit the model:\n  " + "\n  ".join(problems) + _geometry_hint(state, raw, target)
        )

    entries = [Entry(k, Outcome.UNUSED, (Step(Reason.NO_OFFICIAL_NAME),)) for k in checkpoint.unknown]
    if head_dropped is not None:
        entries += [Entry(k, Outcome.UNUSED, (head_dropped,)) for k in ("head.weight", "head.bias")
                    if k in checkpoint.state]
    for key in state:
        if key not in target.shapes:
            entries.append(Entry(key, Outcome.UNUSED, (_unused_step(key, target),)))
        else:
            taken = tuple(steps[key])
            outcome = (Outcome.RESAMPLED if any(s.reason in RESAMPLING for s in taken)
                       else Outcome.CONVERTED if taken else Outcome.LOADED)
            entries.append(Entry(key, outcome, taken))
    entries += [
        Entry(key, Outcome.INITIALISED, (_start_step(key, head_dropped, options),))
        for key in target.shapes if key not in state
    ]
    _refuse_partial_negative_branch(entries, state, raw.path)
    report = LoadReport(raw.path, raw.container, checkpoint.layout, target.description, entries, list(raw.notes))
    return {k: v for k, v in state.items() if k in target.shapes}, report


def _geometry_problems(state: dict[str, Tensor], raw: RawCheckpoint, target: TargetModel) -> list[str]:
    problems = []
    depth = _depth(state)
    if depth != target.depth:
        problems.append(f"depth: {depth} blocks in the checkpoint, {target.depth} in the model")
    heads = known_num_heads(state, raw.hf_config, raw.hparams)
    if heads is not None and heads != target.num_heads:
        problems.append(f"num_heads: {heads} in the checkpoint, {target.num_heads} in the model")
    return problems


def _geometry_hint(state: dict[str, Tensor], raw: RawCheckpoint, target: TargetModel) -> str:
    try:
        geometry = infer_geometry(state, raw.hf_config, raw.hparams)
    except CheckpointError:
        return ""
    names = ("embed_dim", "depth", "num_heads", "patch_size", "mlp_ratio", "in_chans")
    shown = {k: geometry[k] for k in names if k in geometry}
    return (
        f"\nThe checkpoint's geometry: {shown}.\nThe model: {target.description}.\n"
        "Build the model with the checkpoint's width, depth, heads and patch size "
        "(e.g. model.network, or timesformer_from_checkpoint)."
    )


def _grid_of(pos_embed: Tensor, path: str) -> tuple[int, int]:
    n = pos_embed.shape[1] - 1
    side = math.isqrt(n)
    if side * side != n:
        raise CheckpointError(f"{path}: pos_embed: {n} patch positions do not form a square grid; cannot resample it")
    return side, side


def _adapt_embeddings(
    state: dict[str, Tensor], steps: dict[str, list[Step]], target: TargetModel, options: PretrainedWeights, path: str
) -> None:
    """``pos_embed`` with a cls entry, at the model's grid; ``time_embed`` at its frame count."""
    pos = state.get("pos_embed")
    if pos is not None and pos.ndim == 3 and pos.shape[-1] == target.embed_dim:
        pos = pos.float()
        if lacks_cls_position(pos):
            pos = add_cls_position(pos)
            steps["pos_embed"].append(Step(Reason.CLS_POSITION_ADDED))
        grid = _grid_of(pos, path)
        if grid != target.grid:
            mode = options.pos_interpolation
            if mode == "flat_nearest":
                pos = resample_pos_embed_flat(pos, target.grid[0] * target.grid[1])
            else:
                pos = resample_pos_embed(pos, target.grid, grid, mode)
            steps["pos_embed"].append(Step(Reason.GRID_RESAMPLED, {"old": grid, "new": target.grid, "mode": mode}))
        state["pos_embed"] = pos
    time = state.get("time_embed")
    if time is not None and time.ndim == 3 and time.shape[1] != target.num_frames:
        mode = options.time_interpolation
        state["time_embed"] = resample_time_embed(time.float(), target.num_frames, mode)
        fields = {"old": time.shape[1], "new": target.num_frames, "mode": mode}
        steps["time_embed"].append(Step(Reason.FRAMES_RESAMPLED, fields))


def _drop_head_of_other_classes(state: dict[str, Tensor], target: TargetModel) -> Step | None:
    """Remove the checkpoint's head when the class count differs; the step says why."""
    if "head.weight" not in state:
        return None
    classes = state["head.weight"].shape[0]
    if target.num_classes and classes == target.num_classes:
        return None
    state.pop("head.weight")
    state.pop("head.bias", None)
    return Step(Reason.CLASSES_DIFFER, {"checkpoint": classes, "model": target.num_classes})


def _unused_step(key: str, target: TargetModel) -> Step:
    extra = attention_extra(key)
    if extra is not None:
        return Step(Reason.OTHER_ATTENTION, {"part": extra[2].part, "attention": target.attention})
    return Step(Reason.NOT_IN_MODEL)


def _start_step(key: str, head_dropped: Step | None, options: PretrainedWeights) -> Step:
    """How a model tensor the checkpoint does not provide starts."""
    if key.startswith("head."):
        return Step(Reason.HEAD_CLASSES_DIFFER, head_dropped.fields) if head_dropped else Step(Reason.HEAD_ABSENT)
    if ZERO_AT_START.search(key):
        return Step(Reason.ZERO_START)
    extra = attention_extra(key)
    if extra is None:
        return Step(Reason.MODEL_INIT)
    declared = extra[2]
    if declared.init == "dna_init":
        scaled = options.dna_init == "scaled_copy"
        fields = {"policy": options.dna_init, "eps": options.dna_init_eps, "module": extra[0]}
        return Step(Reason.DNA_INIT_SCALED if scaled else Reason.DNA_INIT, fields)
    if declared.init == "alpha_init":
        return Step(Reason.ALPHA_INIT)
    return Step(Reason.OWN_INIT, {"how": declared.how})


def _set_by_dna_init(key: str, module: str) -> bool:
    """Whether ``key`` is a parameter of ``module`` that a DnA init policy sets (Q-, V-)."""
    extra = attention_extra(key)
    return extra is not None and extra[0] == module and extra[2].init == "dna_init"


def _refuse_partial_negative_branch(entries: list[Entry], state: dict[str, Tensor], path: str) -> None:
    """A DnA policy sets Q- and V- of a module together from its ``qkv``: a checkpoint that
    has only some of them would be half overwritten."""
    policy_set: dict[str, list[str]] = defaultdict(list)  # attention module -> its keys
    for e in entries:
        if e.outcome is Outcome.INITIALISED and e.reasons & NEGATIVE_BRANCH_INIT:
            policy_set[e.steps[0].fields["module"]].append(e.key)
    for module, missing in policy_set.items():
        present = [k for k in state if _set_by_dna_init(k, module)]
        if present:
            raise CheckpointError(
                f"{path}: {module} has only part of its negative branch: {present} in the checkpoint, "
                f"{missing} not (a dna_init policy sets Q- and V- together)"
            )
