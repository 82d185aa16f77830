"""Checkpoint import into the attention variants, wherever the weights map: what is loaded,
what the report says was initialised (and how), what is left unused; functions checked
where the variant reduces to the source model."""

import pytest
import torch
from test_checkpoints import TOL, clip, ours, randomise

from dna_video.models.attention import diff_lambda_init
from dna_video.checkpoints import Outcome, Reason, load_pretrained


def reasons(report, outcome):
    return {e.key: e.steps[0].reason for e in report.of(outcome)}


@pytest.mark.parametrize("policy", ["random", "scaled_copy"])
def test_softmax_checkpoint_into_shared_value_dna(policy):
    source = randomise(ours("softmax"))
    model = ours("dna_shared_v")
    report = load_pretrained(model, source.state_dict(), dna_init=policy)
    initialised = reasons(report, Outcome.INITIALISED)
    for path in ("attn", "temporal_attn"):
        assert initialised[f"blocks.0.{path}.q_neg.weight"] is (
            Reason.DNA_INIT_SCALED if policy == "scaled_copy" else Reason.DNA_INIT)
        assert initialised[f"blocks.1.{path}.neg_scalers"] is Reason.ALPHA_INIT
    # Only Q- and alpha are new (there is no V- to set): 2 blocks x 2 paths x (weight, bias, alpha).
    assert len(initialised) == 12 and not report.unused
    state = model.state_dict()
    for key, value in source.state_dict().items():
        assert torch.equal(state[key], value), key
    q_pos = state["blocks.1.attn.qkv.weight"][:32]
    if policy == "scaled_copy":
        torch.testing.assert_close(state["blocks.1.attn.q_neg.weight"], 1e-4 * q_pos)
    else:
        assert 0.015 < state["blocks.1.attn.q_neg.weight"].std() < 0.025  # trunc-normal(0.02)
    # With alpha = 0 the model is the softmax model.
    with torch.no_grad():
        for m in model.attention_modules().values():
            m.neg_scalers.zero_()
    video = clip()
    torch.testing.assert_close(model(video), source(video), **TOL)


def test_dna_checkpoint_into_shared_value_dna_leaves_v_neg_unused():
    source = randomise(ours("dna"))
    model = ours("dna_shared_v")
    report = load_pretrained(model, source.state_dict())
    assert not report.initialised
    assert report.unused["blocks.0.attn.v_neg.weight"] == "negative branch: the model uses dna_shared_v attention"
    assert len(report.unused) == 2 * 2 * 2  # v_neg weight and bias, 2 blocks x 2 paths
    assert torch.equal(model.blocks[1].temporal_attn.q_neg.weight, source.blocks[1].temporal_attn.q_neg.weight)
    assert torch.equal(model.blocks[0].attn.neg_scalers, source.blocks[0].attn.neg_scalers)


def test_softmax_checkpoint_into_cog_is_complete_and_strict():
    source = randomise(ours("softmax"))
    model = ours("cog", attention_kwargs={"cog_softmax_ends": False})
    report = load_pretrained(model, source.state_dict(), strict=True)
    assert not report.initialised and not report.unused
    assert all(torch.equal(model.state_dict()[k], v) for k, v in source.state_dict().items())
    # Same weights, other attention weights: other logits.
    video = clip()
    assert not torch.allclose(model(video), source(video), atol=1e-3)


def test_softmax_checkpoint_into_diff_reports_what_was_initialised():
    source = randomise(ours("softmax"))
    model = ours("diff")
    lambdas_before = model.blocks[1].attn.lambda_q1.detach().clone()
    report = load_pretrained(model, source.state_dict())
    initialised = reasons(report, Outcome.INITIALISED)
    # Reasons the kind declares (AttentionKind.extras), in its own words.
    per_module = {"lambda_q1": Reason.OWN_INIT, "lambda_k1": Reason.OWN_INIT,
                  "lambda_q2": Reason.OWN_INIT, "lambda_k2": Reason.OWN_INIT,
                  "sub_norm.weight": Reason.OWN_INIT}
    expected = {f"blocks.{i}.{path}.{name}": why for i in range(2) for path in ("attn", "temporal_attn")
                for name, why in per_module.items()}
    assert initialised == expected
    # The softmax model's q/k/v biases have no place (published Differential Attention has none).
    assert set(report.unused) == {f"blocks.{i}.{p}.qkv.bias" for i in range(2) for p in ("attn", "temporal_attn")}
    assert torch.equal(model.blocks[1].attn.qkv.weight, source.blocks[1].attn.qkv.weight)
    assert torch.equal(model.blocks[1].attn.lambda_q1, lambdas_before)  # its own N(0, 0.1) draw
    assert torch.equal(model.blocks[0].attn.sub_norm.weight, torch.ones(32))
    assert model.blocks[1].temporal_attn.lambda_init == pytest.approx(diff_lambda_init(2))
    assert "Differential Attention's lambda vector" in report.table()
    assert report.initialised["blocks.1.attn.sub_norm.weight"] == "Differential Attention's per-head RMSNorm: ones, the model's own"
    assert report.initialised["blocks.1.attn.lambda_k2"] == "Differential Attention's lambda vector: N(0, 0.1), the model's own"


def test_per_path_model_takes_each_path_from_a_dna_checkpoint():
    source = randomise(ours("dna"))
    model = ours(temporal_attention="softmax", spatial_attention="dna")
    report = load_pretrained(model, source.state_dict())
    assert not report.initialised
    assert set(report.unused) == {f"blocks.{i}.temporal_attn.{n}" for i in range(2)
                                  for n in ("q_neg.weight", "q_neg.bias", "v_neg.weight", "v_neg.bias", "neg_scalers")}
    assert report.unused["blocks.0.temporal_attn.neg_scalers"].endswith("temporal=softmax,spatial=dna attention")
    assert torch.equal(model.blocks[0].attn.v_neg.weight, source.blocks[0].attn.v_neg.weight)


@pytest.mark.parametrize("kinds", [("diff", "diff"), ("dna_shared_v", "dna_shared_v"), ("softmax", "dna")])
def test_geometry_and_attention_kinds_inferred_from_a_variant_state_dict(kinds):
    from dna_video.checkpoints import infer_geometry

    temporal, spatial = kinds
    model = ours(temporal_attention=temporal, spatial_attention=spatial)
    geometry = infer_geometry(model.state_dict())
    assert geometry["attention"] == spatial and geometry["num_heads"] == 2
    assert geometry.get("temporal_attention", spatial) == temporal
