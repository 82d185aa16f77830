"""Checkpoint layouts (:mod:`dna_video.checkpoints.layouts`) against values written out here:
Hugging Face names both ways, its config.json fields, the fused DnA-ViT qkv, and the geometry
inferred from bare shapes. Found by mutation testing (CONTRIBUTING.md)."""

import pytest
import torch
from test_checkpoints import ours, randomise, tiny_vit

from dna_video.checkpoints import CheckpointError
from dna_video.checkpoints.layouts import (
    hf_config_from_model,
    hf_config_to_kwargs,
    hf_to_official,
    detect_layout,
    infer_geometry,
    known_num_heads,
    to_official,
    official_to_hf,
    split_fused_qqkvv,
)


# -- Hugging Face names ---------------------------------------------------------------------------
def test_hf_keys_without_official_name_are_returned_as_unknown():
    state = {
        "timesformer.embeddings.cls_token": torch.zeros(1, 1, 4),
        "timesformer.encoder.layer.0.attention.attention.qkv.weight": torch.ones(12, 4),
        "timesformer.encoder.layer.0.adapter.dense.weight": torch.zeros(4, 4),  # a block, no such part
        "timesformer.pooler.dense.weight": torch.zeros(4, 4),  # no block at all
    }
    out, unknown = hf_to_official(state)
    assert set(out) == {"cls_token", "blocks.0.attn.qkv.weight"}
    assert torch.equal(out["blocks.0.attn.qkv.weight"], torch.ones(12, 4))
    assert unknown == ["timesformer.encoder.layer.0.adapter.dense.weight", "timesformer.pooler.dense.weight"]


def test_official_to_hf_names_the_classifier_without_prefix_and_refuses_what_hf_lacks():
    state = ours("softmax").state_dict()
    out = official_to_hf(state)
    assert torch.equal(out["classifier.weight"], state["head.weight"])
    assert torch.equal(out["classifier.bias"], state["head.bias"])
    assert torch.equal(out["timesformer.embeddings.cls_token"], state["cls_token"])
    assert torch.equal(out["timesformer.encoder.layer.1.attention.output.dense.bias"], state["blocks.1.attn.proj.bias"])
    assert [k for k in out if not k.startswith("timesformer.")] == ["classifier.weight", "classifier.bias"]
    for key in ("blocks.0.attn.q_neg.weight", "register_tokens"):  # a block part, and no block
        with pytest.raises(CheckpointError, match=rf"^{key}: no Hugging Face TimeSformer parameter corresponds to it$"):
            official_to_hf({key: torch.zeros(2)})


def test_a_fused_qkv_of_other_than_five_parts_is_refused_with_its_shape():
    with pytest.raises(CheckpointError, match=r"^blocks\.0\.attn\.qqkvv\.weight: shape \(12, 4\), expected 5\*D rows"):
        split_fused_qqkvv({"blocks.0.attn.qqkvv.weight": torch.zeros(12, 4)})


# -- config.json ----------------------------------------------------------------------------------
def small_config(**fields):
    return {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32,
            "patch_size": 8, "intermediate_size": 64, **fields}


def test_hf_config_square_fields_as_lists_and_non_square_ones_refused():
    kwargs = hf_config_to_kwargs(small_config(image_size=[48, 48], patch_size=(8, 8)))
    assert kwargs["img_size"] == 48 and kwargs["patch_size"] == 8
    with pytest.raises(CheckpointError, match=r"^config\.json: non-square image_size \[32, 48\] is not supported$"):
        hf_config_to_kwargs(small_config(image_size=[32, 48]))


def test_hf_config_fields_this_model_does_not_implement_are_refused():
    with pytest.raises(CheckpointError, match=r"^config\.json: attention_type='joint_space_time'; only divided_space_time"):
        hf_config_to_kwargs(small_config(attention_type="joint_space_time"))
    with pytest.raises(CheckpointError, match=r"^config\.json: hidden_act='relu'; the MLP here uses exact GELU"):
        hf_config_to_kwargs(small_config(hidden_act="relu"))
    # 61 / 7 is no float that gives back 61 when multiplied by 7.
    with pytest.raises(CheckpointError, match=r"^config\.json: intermediate_size=61 is not representable"):
        hf_config_to_kwargs(small_config(hidden_size=7, num_attention_heads=1, intermediate_size=61))


def test_hf_config_class_count_from_num_labels_without_id2label():
    assert hf_config_to_kwargs(small_config(num_labels=7))["num_classes"] == 7
    assert hf_config_to_kwargs(small_config(num_labels=7, id2label={"0": "a", "1": "b"}))["num_classes"] == 2
    assert hf_config_to_kwargs(small_config())["num_classes"] == 2  # transformers' default


def test_hf_config_from_model_fixed_fields_are_what_transformers_reads():
    transformers = pytest.importorskip("transformers")
    config = hf_config_from_model(ours("softmax", num_classes=3), id2label={0: "a", 1: "b", 2: "c"})
    assert config["architectures"] == ["TimesformerForVideoClassification"]
    assert {k: config[k] for k in ("hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
                                   "initializer_range", "attention_type", "drop_path_rate")} == {
        "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02, "attention_type": "divided_space_time", "drop_path_rate": 0}
    assert config["label2id"] == {"a": 0, "b": 1, "c": 2}
    parsed = transformers.TimesformerConfig(**config)
    assert (parsed.hidden_act, parsed.hidden_dropout_prob, parsed.attention_type) == ("gelu", 0.0, "divided_space_time")
    assert parsed.label2id == {"a": 0, "b": 1, "c": 2} and parsed.intermediate_size == 64


# -- geometry from shapes -------------------------------------------------------------------------
def bare_state(dim=32, patch=8, positions=None):
    state = {"patch_embed.proj.weight": torch.zeros(dim, 3, patch, patch), "cls_token": torch.zeros(1, 1, dim),
             "blocks.0.attn.qkv.weight": torch.zeros(3 * dim, dim)}
    if positions is not None:
        state["pos_embed"] = torch.zeros(1, positions, dim)
    return state


def test_geometry_needs_a_patch_embedding_a_cls_token_and_blocks():
    state = bare_state()
    for missing in ("cls_token", "patch_embed.proj.weight"):
        partial = {k: v for k, v in state.items() if k != missing}
        with pytest.raises(CheckpointError, match=r"^cannot infer the geometry: no patch_embed\.proj\.weight / cls_token$"):
            infer_geometry(partial)
    del state["blocks.0.attn.qkv.weight"]
    with pytest.raises(CheckpointError, match=r"^cannot infer the geometry: no blocks\.N\.\* tensors \(a truncated file"):
        infer_geometry(state)


@pytest.mark.parametrize("positions, side", [(17, 4), (16, 4), (2, 1), (1, 1), (50, 7), (49, 7)])
def test_image_size_from_pos_embed_with_or_without_cls_entry(positions, side):
    assert infer_geometry(bare_state(positions=positions))["img_size"] == side * 8


@pytest.mark.parametrize("dim, heads", [(192, 3), (384, 6), (768, 12), (32, None)])
def test_head_count_of_the_standard_vit_widths(dim, heads):
    assert infer_geometry(bare_state(dim=dim, patch=2)).get("num_heads") == heads


def test_temporal_attention_of_another_kind_is_inferred_only_when_it_differs():
    dna = randomise(ours("dna", temporal_attention="softmax")).state_dict()
    assert infer_geometry(dna)["attention"] == "dna" and infer_geometry(dna)["temporal_attention"] == "softmax"
    assert "temporal_attention" not in infer_geometry(randomise(ours("dna")).state_dict())
    assert "temporal_attention" not in infer_geometry(tiny_vit().state_dict())



def test_layouts_detected_from_key_names():
    hf = official_to_hf(ours("softmax").state_dict())
    bare_hf = {k.removeprefix("timesformer."): v for k, v in hf.items()}
    assert detect_layout(bare_hf) == "huggingface"
    assert detect_layout({k: v for k, v in bare_hf.items() if k.startswith("encoder.layer.")}) == "huggingface"
    assert detect_layout({k: v for k, v in bare_hf.items() if k.startswith("embeddings.patch_")}) == "huggingface"
    timesformer = {k: v for k, v in ours("softmax").state_dict().items() if k != "time_embed"}
    assert detect_layout(timesformer) == "timesformer"  # temporal blocks, no time_embed
    with pytest.raises(CheckpointError, match=r"^w\.pth: not a TimeSformer.*: 7 tensors, e\.g\. \['k0', 'k1', 'k2', 'k3', 'k4', 'k5'\]$"):
        detect_layout({f"k{i}": torch.zeros(1) for i in range(7)}, where="w.pth")
    with pytest.raises(CheckpointError, match=r"^w\.pth: not a TimeSformer"):
        detect_layout({"patch_embed.proj.weight": torch.zeros(1)}, where="w.pth")  # no attention blocks
    with pytest.raises(ValueError, match=r"^unknown layout 'onnx'$"):
        to_official({}, "onnx")


def test_hparams_name_the_attention_kinds_and_the_head_count():
    hparams = {"arch": "tiny", "attention": "dna", "attention_kwargs": {"alpha_init": 0.1},
               "temporal_attention": "softmax", "spatial_attention": "dna", "net_kwargs": {"num_heads": 4}}
    geometry = infer_geometry({}, hparams=hparams)
    assert {k: geometry[k] for k in ("attention", "attention_kwargs", "temporal_attention", "spatial_attention",
                                     "num_heads", "embed_dim")} == {
        "attention": "dna", "attention_kwargs": {"alpha_init": 0.1}, "temporal_attention": "softmax",
        "spatial_attention": "dna", "num_heads": 4, "embed_dim": 64}
    assert known_num_heads({}, None, hparams) == 4


def test_diff_head_count_from_its_lambda_vectors_is_an_integer():
    """diff's lambda vectors have width D / H: 32 / 16 = 2 heads, an int (a float head count
    would build a model of float head width)."""
    geometry = infer_geometry(randomise(ours("diff")).state_dict())
    assert geometry["attention"] == "diff" and geometry["num_heads"] == 2 and type(geometry["num_heads"]) is int
