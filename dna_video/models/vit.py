"""DnA (and the other attention kinds) in image classification: timm's own
``VisionTransformer`` with our attention in every block, registered as timm models.

* :class:`AttentionBlock` is timm's ``Block`` (norms, MLP, LayerScale, drop-path unchanged)
  with ``attn`` built by :func:`dna_video.models.attention.build_attention`. It goes in through
  ``block_fn``, not ``attn_layer``: timm 1.0.31 hands a block's ``depth`` to its attention only
  when the attention is a subclass of its own ``DiffAttention``, and calls attention with
  ``attn_mask`` / ``is_causal`` keywords, which our interface does not take (masks are refused
  here). The block passes its 1-based index to the attention (``diff``'s lambda_init, ``cog``'s
  softmax ends).
* Registered timm names: ``vit_{tiny,small,base}_patch16_224_KIND`` for every attention kind
  that asks for them (``AttentionKind.timm``; softmax is timm's own ``vit_*``), kinds
  registered after this module included (e.g. ``timm.create_model("vit_base_patch16_224_dna",
  num_classes=1000)`` after importing this module), so timm's own training script can build them. No pretrained weights are
  registered: import ViT or DnA-ViT weights with :func:`load_image_checkpoint`.
* Weights: :func:`dna_video.checkpoints.load_image_checkpoint` reads timm ViT, DnA-ViT
  (separate ``q_neg``/``v_neg`` or fused ``qqkvv``) and this package's checkpoints into a
  model built here (the network knows nothing of checkpoint files).

Parameter names are timm's, so a DnA-ViT built here has the reference's names.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

from timm.models import VisionTransformer, build_model_with_cfg, register_model
from timm.models.vision_transformer import Block
from torch import Tensor

from dna_video.models.attention import (
    DEFAULT_ATTENTION,
    Attention,
    AttentionKind,
    build_attention,
    kwargs_by_kind,
    on_register,
)

__all__ = ["AttentionBlock", "vision_transformer", "VIT_PRESETS", "IMAGE_ATTENTIONS"]

VIT_PRESETS: dict[str, dict[str, Any]] = {
    "vit_tiny_patch16_224": dict(patch_size=16, embed_dim=192, depth=12, num_heads=3),
    "vit_small_patch16_224": dict(patch_size=16, embed_dim=384, depth=12, num_heads=6),
    "vit_base_patch16_224": dict(patch_size=16, embed_dim=768, depth=12, num_heads=12),
}
# Kinds registered as timm model names so far (softmax is timm's own ``vit_*``); grows as
# kinds are registered.
IMAGE_ATTENTIONS: list[str] = []


class AttentionBlock(Block):
    """timm's pre-norm ViT block with one of our attention kinds as ``attn``.

    Args (besides timm ``Block``'s, which ``VisionTransformer`` passes):
        attention: attention kind (a registered name).
        attention_kwargs: its extra arguments.
        num_layers: number of blocks of the model (for kinds that depend on depth).
        depth: this block's 0-based index (given by ``VisionTransformer``).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        attention: str = DEFAULT_ATTENTION,
        attention_kwargs: dict[str, Any] | None = None,
        num_layers: int = 0,
        depth: int = 0,
        qkv_bias: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        **block_kwargs: Any,
    ) -> None:
        super().__init__(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop,
                         depth=depth, **block_kwargs)
        if block_kwargs.get("qk_norm") or block_kwargs.get("scale_attn_norm"):
            raise ValueError("qk_norm / scale_attn_norm are timm Attention options; our attention kinds have neither")
        self.attention = attention
        self.attn: Attention = build_attention(
            attention, dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop,
            layer_index=depth + 1, num_layers=num_layers, **dict(attention_kwargs or {}),
        )

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        if attn_mask is not None or is_causal:
            raise ValueError("attention masks are not supported by dna_video attention kinds")
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


def vision_transformer(
    arch: str = "vit_base_patch16_224", attention: str = DEFAULT_ATTENTION, attention_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> VisionTransformer:
    """timm ``VisionTransformer`` of preset ``arch`` (a key of :data:`VIT_PRESETS`, or
    ``custom`` with the geometry in ``kwargs``) with ``attention`` in every block; ``kwargs``
    override any ``VisionTransformer`` argument (``num_classes``, ``img_size``,
    ``drop_path_rate``, ``depth``...)."""
    if arch != "custom" and arch not in VIT_PRESETS:
        raise ValueError(f"unknown ViT arch {arch!r}; choose one of {sorted(VIT_PRESETS)} or 'custom'")
    args = {**VIT_PRESETS.get(arch, {}), **kwargs}
    depth = args.get("depth", 12)
    per_kind = kwargs_by_kind([attention], attention_kwargs)[attention]
    block_fn = partial(AttentionBlock, attention=attention, attention_kwargs=per_kind, num_layers=depth)
    return VisionTransformer(block_fn=block_fn, **args)


# -- timm registry --------------------------------------------------------------------------
default_cfgs: dict[str, dict[str, Any]] = {}


def _entrypoint(name: str, arch: str, attention: str):
    def create(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
        if pretrained:
            raise ValueError(
                f"{name}: no pretrained weights are registered; build it with pretrained=False and import "
                "weights with dna_video.checkpoints.load_image_checkpoint (timm ViT or DnA-ViT checkpoints)"
            )
        attention_kwargs = kwargs.pop("attention_kwargs", None)
        per_kind = kwargs_by_kind([attention], attention_kwargs)[attention]
        args = {**VIT_PRESETS[arch], **kwargs}
        block_fn = partial(AttentionBlock, attention=attention, attention_kwargs=per_kind, num_layers=args["depth"])
        return build_model_with_cfg(
            VisionTransformer, name, pretrained=False, feature_cfg=dict(out_indices=3, feature_cls="getter"),
            block_fn=block_fn, **args,
        )

    create.__name__ = create.__qualname__ = name
    create.__module__ = __name__
    create.__doc__ = f"timm ViT {arch} with {attention} attention in every block (dna_video)."
    return create


def _register_timm_names(kind: AttentionKind) -> None:
    if not kind.timm or kind.name in IMAGE_ATTENTIONS:
        return
    module = sys.modules[__name__]
    for arch in VIT_PRESETS:
        name = f"{arch}_{kind.name}"
        default_cfgs[name] = {
            "url": "", "num_classes": 1000, "input_size": (3, 224, 224), "crop_pct": 0.875,
            "interpolation": "bicubic", "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
            "first_conv": "patch_embed.proj", "classifier": "head",
        }
        fn = _entrypoint(name, arch, kind.name)
        setattr(module, name, fn)
        register_model(fn)
    IMAGE_ATTENTIONS.append(kind.name)


on_register(_register_timm_names)
