"""Checkpoint layouts and the key maps between them and ours.

Our parameter names ARE the official TimeSformer names (see ``timesformer.py``), with the DnA
reference's ``q_neg``, ``v_neg``, ``neg_scalers`` in both attentions. Every other layout is
renamed (or split) into those names here, and nothing else:

============================  ==============================================================
layout                        recognised by / converted how
============================  ==============================================================
``timesformer``               ``temporal_attn.*`` or ``time_embed`` keys: official
                              TimeSformer, DnA reference and this project; names used as is
``vit``                       image ViT (timm layout, also DnA-ViT with separate ``q_neg``/
                              ``v_neg``): names used as is; the temporal path is filled in
                              at conversion (see :mod:`.conversion`)
``dna_vit_fused``             DnA-ViT ``attn.qqkvv`` rows [Q+; Q-; K; V+; V-], split into
                              ``qkv`` [Q+; K; V+], ``q_neg``, ``v_neg``
``huggingface``               ``TimesformerForVideoClassification`` / ``TimesformerModel``:
                              renamed by :data:`HF_BLOCK_NAMES` / :data:`HF_TOP_NAMES`
============================  ==============================================================

The architecture facts a conversion relies on (temporal path copied from the spatial one,
``temporal_fc`` / ``time_embed`` zero, ``pos_embed`` without a cls entry, the sign of V-, the
parameters each attention kind adds, what is refused) are stated here, beside the key maps.

Geometry (width, depth, heads, patch, ...) is read from a Hugging Face ``config.json``, from
our Lightning hyper-parameters, or inferred from tensor shapes.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import Tensor

from dna_video.models.timesformer import PRESETS, TimeSformer, TimeSformerSpec
from dna_video.models.attention import CheckpointExtra, attention_kind, attention_kinds
from dna_video.checkpoints.io import CheckpointError
from dna_video.checkpoints.upgrade import upgrade_model_options
from dna_video.checkpoints.outcomes import Reason, Step

__all__ = [
    "LAYOUT_NAMES",
    "HF_BLOCK_NAMES",
    "HF_TOP_NAMES",
    "HF_CONFIG_FIELDS",
    "detect_layout",
    "to_official",
    "official_to_hf",
    "official_to_reference",
    "hf_config_to_kwargs",
    "hf_config_from_model",
    "infer_geometry",
]

LAYOUT_NAMES = {
    "timesformer": "TimeSformer (official / DnA reference names)",
    "vit": "image ViT (timm names)",
    "dna_vit_fused": "DnA-ViT with fused qqkvv",
    "huggingface": "Hugging Face TimeSformer",
}

# Hugging Face -> official, inside `encoder.layer.{i}.` / `blocks.{i}.` (module paths; the
# `.weight` / `.bias` suffix is kept).
HF_BLOCK_NAMES = {
    "attention.attention.qkv": "attn.qkv",
    "attention.output.dense": "attn.proj",
    "temporal_attention.attention.qkv": "temporal_attn.qkv",
    "temporal_attention.output.dense": "temporal_attn.proj",
    "temporal_layernorm": "temporal_norm1",
    "temporal_dense": "temporal_fc",
    "layernorm_before": "norm1",
    "layernorm_after": "norm2",
    "intermediate.dense": "mlp.fc1",
    "output.dense": "mlp.fc2",
}
# Hugging Face -> official, outside the blocks (full names, after `timesformer.` is removed).
HF_TOP_NAMES = {
    "embeddings.cls_token": "cls_token",
    "embeddings.position_embeddings": "pos_embed",
    "embeddings.time_embeddings": "time_embed",
    "embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
    "embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
    "layernorm.weight": "norm.weight",
    "layernorm.bias": "norm.bias",
    "classifier.weight": "head.weight",
    "classifier.bias": "head.bias",
}
_HF_BLOCK = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
_OUR_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)\.(weight|bias)$")
_BLOCK_INDEX = re.compile(r"^blocks\.(\d+)\.")

# Standard ViT widths and their head counts (head dim 64): used only when a checkpoint
# gives no other way to know the number of heads.
VIT_HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16}


def detect_layout(state: dict[str, Tensor], where: str = "checkpoint") -> str:
    """Which layout ``state`` (wrappers already removed) is in; a key of :data:`LAYOUT_NAMES`.
    ``where`` names the source in the error (e.g. the file path)."""
    keys = list(state)
    if any(k.startswith(("timesformer.", "embeddings.patch_embeddings", "encoder.layer.")) for k in keys):
        return "huggingface"
    if any(".attn.qqkvv." in k for k in keys):
        return "dna_vit_fused"
    if any(".temporal_attn." in k for k in keys) or "time_embed" in state:
        return "timesformer"
    if "patch_embed.proj.weight" in state and any(re.match(r"blocks\.\d+\.attn\.qkv\.weight$", k) for k in keys):
        return "vit"
    raise CheckpointError(
        f"{where}: not a TimeSformer, ViT, DnA or Hugging Face TimeSformer state dict: "
        f"{len(keys)} tensors, e.g. {keys[:6]}"
    )


def hf_to_official(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], list[str]]:
    """Rename Hugging Face keys to official ones; also returns the keys that have no match."""
    out, unknown = {}, []
    for key, value in state.items():
        name = key.removeprefix("timesformer.")
        if name in HF_TOP_NAMES:
            out[HF_TOP_NAMES[name]] = value
            continue
        m = _HF_BLOCK.match(name)
        if m and m.group(2) in HF_BLOCK_NAMES:
            out[f"blocks.{m.group(1)}.{HF_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"] = value
        else:
            unknown.append(key)
    return out, unknown


def official_to_hf(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Official (our) names -> ``TimesformerForVideoClassification`` names."""
    top = {v: k for k, v in HF_TOP_NAMES.items()}
    block = {v: k for k, v in HF_BLOCK_NAMES.items()}
    out = {}
    for key, value in state.items():
        m = _OUR_BLOCK.match(key)
        if key in top:
            name = top[key]
        elif m and m.group(2) in block:
            name = f"encoder.layer.{m.group(1)}.{block[m.group(2)]}.{m.group(3)}"
        else:
            raise CheckpointError(f"{key}: no Hugging Face TimeSformer parameter corresponds to it")
        out[name if name.startswith("classifier.") else f"timesformer.{name}"] = value
    return out


def split_fused_qqkvv(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Step]]:
    """Split every DnA-ViT ``attn.qqkvv`` ([Q+; Q-; K; V+; V-] rows) into ``qkv`` [Q+; K; V+],
    ``q_neg`` and ``v_neg``. Returns the new dict and ``new key -> step`` for the report."""
    out, notes = {}, {}
    for key, value in state.items():
        if ".qqkvv." not in key:
            out[key] = value
            continue
        if value.shape[0] % 5:
            raise CheckpointError(f"{key}: shape {tuple(value.shape)}, expected 5*D rows [Q+; Q-; K; V+; V-]")
        q_pos, q_neg, k, v_pos, v_neg = value.chunk(5, dim=0)
        parts = {"qkv": torch.cat([q_pos, k, v_pos]), "q_neg": q_neg, "v_neg": v_neg}
        for name, tensor in parts.items():
            new = key.replace(".qqkvv.", f".{name}.")
            out[new] = tensor
            notes[new] = Step(Reason.SPLIT_FROM_FUSED, {"source": key})
    return out, notes


def to_official(state: dict[str, Tensor], layout: str) -> tuple[dict[str, Tensor], dict[str, Step], list[str]]:
    """``state`` in official names: ``(tensors, converted key -> step, source keys with no
    official name)``."""
    if layout == "huggingface":
        out, unknown = hf_to_official(state)
        return out, {k: Step(Reason.RENAMED_FROM_HF) for k in out}, unknown
    if layout == "dna_vit_fused":
        out, notes = split_fused_qqkvv(state)
        return out, notes, []
    if layout in ("timesformer", "vit"):
        return dict(state), {}, []
    raise ValueError(f"unknown layout {layout!r}")


# The DnA reference's own files: the official TimeSformer's ``.pyth`` container, every key
# under the ``model.`` attribute of its wrapper (see :func:`dna_video.export.reference.export_reference`).
REFERENCE_PREFIX = "model."


def official_to_reference(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Official (our) names -> the reference TimeSformer's ``model_state`` keys. Our names are
    the reference's (``attn.qkv``, ``attn.q_neg``, ``attn.v_neg``, ``attn.neg_scalers``, the
    same under ``temporal_attn``), and its TimeSformer fork ADDS the negative branch as ours
    does: only the prefix changes."""
    return {REFERENCE_PREFIX + k: v for k, v in state.items()}


# -- architecture facts used when converting (see :mod:`.conversion`) ----------------------
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

# Image checkpoints have no temporal path: the official convention starts it as a copy of
# the spatial one (model name fragment -> (checkpoint name fragment, what it is)). Whatever
# parameters the model's temporal attention has are copied, DnA's included.
TEMPORAL_FROM_SPATIAL = {".temporal_attn.": (".attn.", "attention"), ".temporal_norm1.": (".norm1.", "norm1")}

# Model tensors that start at zero when the checkpoint lacks them (image checkpoints), so that
# the video model starts as the image model: the temporal path's output layer, time_embed.
ZERO_AT_START = re.compile(r"^time_embed$|\.temporal_fc\.(weight|bias)$")

# Parameters attention kinds add to softmax attention's ``qkv`` / ``proj`` are declared by
# each kind (``AttentionKind.extras`` in :mod:`dna_video.models.attention.registry`): the part
# of the method they belong to and how the model's tensor starts when the checkpoint has none.
_ATTENTION_PARAM = re.compile(r"\.(?:temporal_)?attn\.([^.]+)(?:\.(?:weight|bias))?$")


def attention_extras() -> dict[str, CheckpointExtra]:
    """Parameter name -> its declaration, over every registered attention kind."""
    return {name: extra for kind in attention_kinds() for name, extra in attention_kind(kind).extras.items()}


# Implementations that SUBTRACT the negative branch (the reference's ``vit/dna.py``, VisCoP)
# hold V- with the opposite sign of ours (and of the reference's TimeSformer fork).
SUBTRACTED_BRANCH = re.compile(r"\.v_neg\.(weight|bias)$")


def attention_extra(key: str) -> tuple[str, str, CheckpointExtra] | None:
    """``(attention module, parameter name, its declaration)`` when ``key`` is a parameter an
    attention kind adds to softmax attention, e.g. ``("blocks.0.attn", "q_neg", ...)``; else None."""
    m = _ATTENTION_PARAM.search(key)
    extra = attention_extras().get(m.group(1)) if m is not None else None
    if extra is None:
        return None
    return key[: m.start(1) - 1], m.group(1), extra


def spatial_source(key: str) -> tuple[str, str] | None:
    """``(checkpoint key, what it is)`` a temporal-path model key is copied from; else None."""
    for temporal, (spatial, what) in TEMPORAL_FROM_SPATIAL.items():
        if temporal in key:
            return key.replace(temporal, spatial), what
    return None


def lacks_cls_position(pos_embed: Tensor) -> bool:
    """True for a ``pos_embed`` of patch positions only (a square count: DnA-ViT, DeiT-III,
    whose cls token has no position embedding); TimeSformer's has the cls entry first."""
    n = pos_embed.shape[1]
    return n > 1 and math.isqrt(n) ** 2 == n


def add_cls_position(pos_embed: Tensor) -> Tensor:
    """A zero cls entry in front: the cls token keeps seeing no position embedding."""
    return torch.cat([pos_embed.new_zeros(1, 1, pos_embed.shape[-1]), pos_embed], dim=1)


# -- geometry -----------------------------------------------------------------------------
def _square(value: Any, what: str) -> int:
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise CheckpointError(f"config.json: non-square {what} {value} is not supported")
        value = value[0]
    return int(value)


# Hugging Face TimeSformer ``config.json`` field -> (our TimeSformer argument, the field's
# default in transformers). Used both ways; the type of the default is the field's type.
# Fields not 1:1 (intermediate_size <-> mlp_ratio, id2label / num_labels <-> num_classes,
# attention_type, hidden_act) are handled where they are used.
HF_CONFIG_FIELDS: dict[str, tuple[str, Any]] = {
    "image_size": ("img_size", 224),
    "patch_size": ("patch_size", 16),
    "num_channels": ("in_chans", 3),
    "num_frames": ("num_frames", 8),
    "hidden_size": ("embed_dim", 768),
    "num_hidden_layers": ("depth", 12),
    "num_attention_heads": ("num_heads", 12),
    "qkv_bias": ("qkv_bias", True),
    "layer_norm_eps": ("norm_eps", 1e-6),
}
_HF_SQUARE_FIELDS = ("image_size", "patch_size")  # an int, or a [h, w] list with h == w


def _hf_field(config: dict[str, Any], name: str) -> Any:
    """``config[name]`` (or transformers' default) as the TimeSformer argument's value."""
    default = HF_CONFIG_FIELDS[name][1]
    value = config.get(name, default)
    return _square(value, name) if name in _HF_SQUARE_FIELDS else type(default)(value)


def hf_config_to_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """:class:`TimeSformer` arguments that reproduce a Hugging Face TimeSformer ``config.json``.

    Refuses (with the reason) what our model does not implement: attention types other than
    divided space-time, activations other than exact GELU, non-square images or patches.
    """
    attention_type = config.get("attention_type", "divided_space_time")
    if attention_type != "divided_space_time":
        raise CheckpointError(f"config.json: attention_type={attention_type!r}; only divided_space_time is implemented")
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise CheckpointError(f"config.json: hidden_act={act!r}; the MLP here uses exact GELU ('gelu') only")
    kwargs = {ours: _hf_field(config, name) for name, (ours, _) in HF_CONFIG_FIELDS.items()}
    dim = kwargs["embed_dim"]
    hidden = int(config.get("intermediate_size", 4 * dim))
    mlp_ratio = hidden / dim
    if int(dim * mlp_ratio) != hidden:
        raise CheckpointError(f"config.json: intermediate_size={hidden} is not representable as hidden_size * mlp_ratio")
    id2label = config.get("id2label")
    num_classes = len(id2label) if id2label else int(config.get("num_labels", 2))
    return dict(num_classes=num_classes, **kwargs, mlp_ratio=mlp_ratio)


def hf_config_from_model(model: TimeSformer, id2label: dict[int, str] | None = None) -> dict[str, Any]:
    """A Hugging Face ``config.json`` (as a dict) describing ``model`` (softmax attention)."""
    block = model.blocks[0]
    ours = dict(
        img_size=model.img_size,
        patch_size=model.patch_size,
        in_chans=model.patch_embed.proj.in_channels,
        num_frames=model.num_frames,
        embed_dim=model.embed_dim,
        depth=len(model.blocks),
        num_heads=block.attn.num_heads,
        qkv_bias=block.attn.qkv.bias is not None,
        norm_eps=model.norm.eps,
    )
    id2label = id2label or {i: f"LABEL_{i}" for i in range(model.num_classes)}
    return {
        "architectures": ["TimesformerForVideoClassification"],
        "model_type": "timesformer",
        **{name: ours[kwarg] for name, (kwarg, _) in HF_CONFIG_FIELDS.items()},
        "intermediate_size": block.mlp.fc1.out_features,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        "attention_type": "divided_space_time",
        "drop_path_rate": 0,  # transformers types this field as int
        "id2label": {str(i): name for i, name in id2label.items()},
        "label2id": {name: i for i, name in id2label.items()},
    }


def _hparams_kwargs(hparams: dict[str, Any] | None) -> dict[str, Any] | None:
    """Geometry stated by one of our Lightning checkpoints (a video or probe module's
    hyper-parameters, current format: the ``network`` spec); None when there are none or they
    name no preset."""
    if hparams is None:
        return None
    hparams = upgrade_model_options(hparams)  # a 0.1 checkpoint's options in their 0.2 names
    network = hparams.get("network")
    if not isinstance(network, dict) or network.get("arch", "base") not in PRESETS:
        return None
    kwargs = TimeSformerSpec.of(network).kwargs()
    for key in ("num_classes", "num_frames", "img_size"):
        if key in hparams:
            kwargs[key] = hparams[key]
    return {k: v for k, v in kwargs.items() if k in _GEOMETRY_KEYS}


# What a checkpoint's hyper-parameters say about the network's tensors (dropout rates,
# checkpointing and compiling are how it runs, not what it holds).
_GEOMETRY_KEYS = {
    "num_classes", "num_frames", "img_size", "patch_size", "in_chans", "embed_dim", "depth", "num_heads",
    "mlp_ratio", "qkv_bias", "attention", "attention_kwargs", "temporal_attention", "spatial_attention",
    "embed_interpolation", "norm_eps",
}


def infer_geometry(
    state: dict[str, Tensor],
    hf_config: dict[str, Any] | None = None,
    hparams: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """:class:`TimeSformer` arguments for the checkpoint ``state`` (official names).

    From the Hugging Face config or our hyper-parameters when present, else from shapes:
    width, depth, patch, channels, MLP ratio, qkv bias, classes, frames, resolution and the
    attention kind. The head count is not stored in a softmax state dict: it comes from DnA's
    ``neg_scalers`` when present, else from the ViT convention (head dim 64) for the standard
    widths; otherwise ``num_heads`` is left out and must be given.
    """
    if hf_config is not None:
        return {**hf_config_to_kwargs(hf_config), "attention": "softmax"}
    if (kwargs := _hparams_kwargs(hparams)) is not None:
        return kwargs
    if "patch_embed.proj.weight" not in state or "cls_token" not in state:
        raise CheckpointError("cannot infer the geometry: no patch_embed.proj.weight / cls_token")
    proj = state["patch_embed.proj.weight"]
    dim, in_chans, patch = proj.shape[0], proj.shape[1], proj.shape[-1]
    depth = _depth(state)
    if depth == 0:
        raise CheckpointError(
            "cannot infer the geometry: no blocks.N.* tensors (a truncated file, or not a ViT/TimeSformer)"
        )
    kwargs: dict[str, Any] = dict(embed_dim=dim, depth=depth, patch_size=patch, in_chans=in_chans)
    if "blocks.0.mlp.fc1.weight" in state:
        kwargs["mlp_ratio"] = state["blocks.0.mlp.fc1.weight"].shape[0] / dim
    kwargs["qkv_bias"] = "blocks.0.attn.qkv.bias" in state
    kwargs["attention"] = _attention_kind(state, "blocks.0.attn.")
    temporal = _attention_kind(state, "blocks.0.temporal_attn.")
    if any(k.startswith("blocks.0.temporal_attn.") for k in state) and temporal != kwargs["attention"]:
        kwargs["temporal_attention"] = temporal
    if "head.weight" in state:
        kwargs["num_classes"] = state["head.weight"].shape[0]
    if "time_embed" in state:
        kwargs["num_frames"] = state["time_embed"].shape[1]
    if "pos_embed" in state:
        n = state["pos_embed"].shape[1]
        # With or without a cls entry: isqrt(s*s + 1) == isqrt(s*s) == s for every grid side s >= 1.
        side = math.isqrt(n)
        kwargs["img_size"] = side * patch
    heads = _stated_heads(state)
    if heads is None:
        heads = VIT_HEADS_BY_WIDTH.get(dim)
    if heads is not None:
        kwargs["num_heads"] = heads
    return kwargs


def known_num_heads(
    state: dict[str, Tensor], hf_config: dict[str, Any] | None, hparams: dict[str, Any] | None
) -> int | None:
    """The checkpoint's head count when the checkpoint states it (not a convention): the
    sources of :func:`infer_geometry` in the same order, without its width convention and
    without refusing the rest of a Hugging Face config (that is for building a model)."""
    if hf_config is not None:
        return _hf_field(hf_config, "num_attention_heads")
    if (kwargs := _hparams_kwargs(hparams)) is not None:
        return int(kwargs["num_heads"])
    return _stated_heads(state)


def _attention_kind(state: dict[str, Tensor], prefix: str) -> str:
    """The attention kind of the module under ``prefix`` as far as its tensors tell: the first
    registered kind whose extra parameters are exactly those present (cog has softmax's
    tensors: it reads as ``softmax``)."""
    present = {name for name in attention_extras() if prefix + name in state or f"{prefix}{name}.weight" in state}
    for name in attention_kinds():
        if set(attention_kind(name).extras) == present:
            return name
    return "softmax"


def _depth(state: dict[str, Tensor]) -> int:
    """Number of blocks: 1 + the highest ``blocks.N.`` index (0 when there is none)."""
    return 1 + max((int(m.group(1)) for k in state if (m := _BLOCK_INDEX.match(k))), default=-1)


def _stated_heads(state: dict[str, Tensor]) -> int | None:
    """The head count where the first block's attention tensors state it (DnA's per-head
    ``neg_scalers``, diff's lambda width), else None."""
    proj = state.get("patch_embed.proj.weight")
    dim = int(proj.shape[0]) if proj is not None else 0
    for name in attention_kinds():
        read = attention_kind(name).heads_from_state
        heads = read(state, "blocks.0.attn.", dim) if read is not None else None
        if heads is not None:
            return heads
    return None
