"""Checkpoint format versions, and the upgrade of what older releases wrote (checkpoints,
configs, options).

A checkpoint of this package records :data:`FORMAT_KEY` = :data:`FORMAT_VERSION`. Version 1 is
0.1.0's (no key): the video and probe modules took every option flat (``arch``, ``net_kwargs``,
``init_from``, ``warmup_steps``...); version 2 (0.2) groups them (``network``, ``init``,
``schedule``, ``evaluation``, ``probe``); version 3 (0.3) moves ``pair_seed`` into ``init``.
:data:`OPTIONS_0_1` maps each 0.1 option to its 0.2 place, :data:`OPTIONS_0_2` each option of
format 2 that moved in 0.3; the same tables upgrade checkpoint hyper-parameters
(:func:`upgrade_checkpoint`), the ``model`` section of a config (:func:`upgrade_model_options`)
and ``--model.X`` command-line options (:func:`upgrade_arguments`). Plain dicts in, plain dicts
out: no Lightning, no torch.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

__all__ = [
    "FORMAT_KEY",
    "FORMAT_VERSION",
    "OPTIONS_0_1",
    "OPTIONS_0_2",
    "RENAMED_OPTIONS",
    "format_version",
    "upgrade_checkpoint",
    "upgrade_model_options",
    "upgrade_arguments",
]

FORMAT_KEY = "dna_video_format"
FORMAT_VERSION = 3

# 0.1 option of the video / probe module -> its dotted place in 0.2 (under ``model``).
# ``net_kwargs`` and ``init_kwargs`` were dicts: their entries go into ``network`` / ``init``.
OPTIONS_0_1: dict[str, str] = {
    "arch": "network.arch",
    "attention": "network.attention",
    "temporal_attention": "network.temporal_attention",
    "spatial_attention": "network.spatial_attention",
    "attention_kwargs": "network.attention_kwargs",
    "drop_path_rate": "network.drop_path_rate",
    "head_dropout": "network.head_dropout",
    "grad_checkpointing": "network.grad_checkpointing",
    "compile": "network.compile",
    "net_kwargs": "network",
    "init_from": "init.source",
    "init_strict": "init.strict",
    "dna_init": "init.dna_init",
    "init_kwargs": "init",
    "lr_scheduler_interval": "schedule.interval",
    "lr_scheduler_monitor": "schedule.monitor",
    "warmup_steps": "schedule.warmup_steps",
    "view_aggregation": "evaluation.view_aggregation",
    "aggregate": "evaluation.aggregate",
    "eval_chunk_size": "evaluation.chunk_size",
    # the probe's own
    "num_probes": "probe.num_probes",
    "probe_layers": "probe.layers",
    "cross_attention": "probe.cross_attention",
    "interaction": "probe.interaction",
    "init_probes_from_backbone": "probe.init_from_backbone",
    "neg_init": "probe.neg_init",
    "neg_init_eps": "probe.neg_init_eps",
    "cross_alpha_init": "probe.alpha_init",
}
_MERGED = {"net_kwargs", "init_kwargs"}  # dicts whose entries move one by one
# Option of the video / probe module in format 2 -> its dotted place in 0.3 (under ``model``):
# read in its new place, with a warning, until 0.4.
OPTIONS_0_2: dict[str, str] = {
    "pair_seed": "init.pair_seed",
}
#: Every old option name of the video / probe module -> its current place.
RENAMED_OPTIONS: dict[str, str] = {**OPTIONS_0_1, **OPTIONS_0_2}
# 0.1 checkpoints that are not of the video or probe module (the image module kept its options).
_IMAGE_ONLY = {"warmup_epochs", "min_lr", "warmup_lr"}


def format_version(checkpoint: dict[str, Any]) -> int:
    """The format of a checkpoint of this package (1: 0.1.0's, which recorded none)."""
    return int(checkpoint.get(FORMAT_KEY, 1))


def _is_0_1_video_options(options: dict[str, Any]) -> bool:
    return bool(set(options) & set(OPTIONS_0_1)) and not set(options) & _IMAGE_ONLY and "network" not in options


def upgrade_model_options(options: dict[str, Any]) -> dict[str, Any]:
    """The current form of a video or probe module's options given in older names (0.1's,
    :data:`OPTIONS_0_1`; format 2's, :data:`OPTIONS_0_2`); the same dict when none is old (current
    options, the image module's). A ``class_path`` spec's ``init_args`` are upgraded in place
    of the spec."""
    if "class_path" in options and isinstance(options.get("init_args"), dict):
        upgraded = upgrade_model_options(options["init_args"])
        return options if upgraded is options["init_args"] else {**options, "init_args": upgraded}
    if _is_0_1_video_options(options):
        options = _upgrade_0_1(options)
    return _upgrade_0_2(options)


def _upgrade_0_2(options: dict[str, Any]) -> dict[str, Any]:
    moved = [key for key in OPTIONS_0_2 if key in options]
    if not moved:
        return options
    out = {k: copy.deepcopy(v) for k, v in options.items() if k not in moved}
    for key in moved:
        group, _, field = OPTIONS_0_2[key].partition(".")
        holder = dict(out.get(group) or {})
        if field in holder and holder[field] != options[key]:
            raise ValueError(f"model.{key} ({options[key]!r}, its name before 0.3) and model.{group}.{field} "
                             f"({holder[field]!r}) disagree: keep model.{group}.{field} only")
        holder[field] = copy.deepcopy(options[key])
        out[group] = holder
    return out


def _upgrade_0_1(options: dict[str, Any]) -> dict[str, Any]:
    if "num_probes" in options:
        # 0.1's probe module passed these through to the video module; its backbone was always frozen.
        options = {k: v for k, v in options.items() if k not in ("freeze_backbone", "backbone_lr_mult")}
    out: dict[str, Any] = {}
    for key, value in options.items():
        place = OPTIONS_0_1.get(key)
        if place is None:
            out[key] = copy.deepcopy(value)
        elif key in _MERGED:
            for inner, inner_value in (value or {}).items():
                out.setdefault(place, {})[inner] = copy.deepcopy(inner_value)
        else:
            group, _, field = place.partition(".")
            out.setdefault(group, {})[field] = copy.deepcopy(value)
    return out


def upgrade_checkpoint(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """``checkpoint`` (a loaded ``.ckpt`` dict) in the current format: hyper-parameters in the
    current names, the format key set. The same dict, changed in place, and returned."""
    if format_version(checkpoint) >= FORMAT_VERSION:
        return checkpoint
    # upgrade_model_options reads each older format: 0.1's flat names, format 2's pair_seed.
    hparams = checkpoint.get("hyper_parameters")
    if isinstance(hparams, dict):
        upgraded = upgrade_model_options(dict(hparams))
        hparams.clear()
        hparams.update(upgraded)
    checkpoint[FORMAT_KEY] = FORMAT_VERSION
    return checkpoint


def upgrade_arguments(args: list[str]) -> tuple[list[str], list[str]]:
    """Command-line options in older names (0.1's ``--model.warmup_steps=40``,
    ``--model.net_kwargs {depth: 2}``, format 2's ``--model.pair_seed 3``) in their current
    names; returns (arguments, the renames made, as ``old -> new`` lines for a warning)."""
    out: list[str] = []
    renamed: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        prefix = next((p for p in ("--model.init_args.", "--model.") if name.startswith(p)), None)
        key = name[len(prefix):] if prefix else ""
        if key not in RENAMED_OPTIONS:
            out.append(arg)
            i += 1
            continue
        if not eq:  # `--model.x VALUE`
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        i += 1
        place = RENAMED_OPTIONS[key]
        if key in _MERGED:
            entries = yaml.safe_load(value) or {}
            if not isinstance(entries, dict):
                raise ValueError(f"--model.{key}: expected a mapping such as {{depth: 2}}, got {value!r}")
            new = [f"--model.{place}.{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
                   for k, v in entries.items()]
        else:
            new = [f"--model.{place}={value}"]
        out += new
        renamed.append(f"--model.{key} -> {', '.join(n.partition('=')[0] for n in new)}")
    return out, renamed
