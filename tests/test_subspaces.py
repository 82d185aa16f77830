"""Subspace analysis of DnA's projections: principal angles of known subspaces (identical: 0,
orthogonal: 90 degrees), every figure against an independent computation (QR + SVD, the
Frobenius formula), intruder dimensions of a known case, and `analyze subspaces`."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from dna_video.analysis.subspaces import intruder_dimensions, intruder_records, subspace_records
from dna_video.models.attention import DenoisingAttention
from dna_video.models.timesformer import TimeSformer

DIM, HEADS = 16, 2
D_HEAD = DIM // HEADS


def tiny_dna(seed=0, depth=2):
    torch.manual_seed(seed)
    return TimeSformer(num_classes=3, img_size=16, num_frames=2, patch_size=8, embed_dim=DIM, depth=depth,
                       num_heads=HEADS, attention="dna")


def test_identical_subspaces_are_0_and_orthogonal_ones_90_degrees():
    net = tiny_dna(depth=1)
    spatial: DenoisingAttention = net.blocks[0].attn
    temporal: DenoisingAttention = net.blocks[0].temporal_attn
    with torch.no_grad():
        v_pos = spatial.qkv.weight[2 * DIM:]
        # V- = M_h V+_h per head with M_h invertible: the same row space, another matrix.
        mix = torch.randn(HEADS, D_HEAD, D_HEAD) + 3 * torch.eye(D_HEAD)
        spatial.v_neg.weight.copy_(torch.cat([mix[h] @ v_pos[h * D_HEAD:(h + 1) * D_HEAD] for h in range(HEADS)]))
        # Temporal: V+_h reads coordinates 0..7, V-_h coordinates 8..15 (orthogonal row spaces).
        eye = torch.eye(DIM)
        temporal.qkv.weight[2 * DIM:] = torch.cat([eye[:D_HEAD], eye[:D_HEAD]]) * 2.0
        temporal.v_neg.weight.copy_(torch.cat([eye[D_HEAD:], eye[D_HEAD:]]) * 0.5)
    records = {(r["module"], r["head"], r["pair"]): r for r in subspace_records(net)}
    for h in range(HEADS):
        same = records["blocks.0.attn", h, "v"]
        assert len(same["angles_deg"]) == D_HEAD
        assert max(same["angles_deg"]) < 1e-4 and same["mean_deg"] < 1e-4
        orthogonal = records["blocks.0.temporal_attn", h, "v"]
        assert orthogonal["angles_deg"] == pytest.approx([90.0] * D_HEAD)
        assert orthogonal["min_deg"] == pytest.approx(90.0) and orthogonal["frobenius"] == pytest.approx(0.0)


def independent_angles(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Principal angles between the row spaces of a and b (each d x D): orthonormal bases by
    QR of the transposes, cosines = singular values of Qa^T Qb."""
    qa, _ = np.linalg.qr(a.T)
    qb, _ = np.linalg.qr(b.T)
    cosines = np.clip(np.linalg.svd(qa.T @ qb, compute_uv=False), -1, 1)
    return np.sort(np.degrees(np.arccos(cosines)))


def test_every_figure_equals_an_independent_computation():
    net = tiny_dna(seed=3)
    with torch.no_grad():
        for module in net.attention_modules().values():
            module.neg_scalers.uniform_(-1, 1)
            # Partly aligned subspaces, so the angles are neither 0 nor all near 90.
            module.v_neg.weight.add_(module.qkv.weight[2 * DIM:] * 2)
    records = subspace_records(net)
    assert len(records) == 2 * 2 * HEADS * 2  # depth x (spatial, temporal) x heads x (v, q)
    keys = {"module", "layer", "kind", "head", "pair", "angles_deg", "mean_deg", "min_deg", "frobenius",
            "frobenius_abs", "alpha"}
    for r in records:
        assert keys <= set(r)
        module = net.get_submodule(r["module"])
        assert r["kind"] == ("temporal" if r["module"].endswith("temporal_attn") else "spatial")
        assert r["layer"] == int(r["module"].split(".")[1])
        rows = slice(r["head"] * D_HEAD, (r["head"] + 1) * D_HEAD)
        if r["pair"] == "v":
            pos = module.qkv.weight[2 * DIM:][rows].detach().double().numpy()
            neg = module.v_neg.weight[rows].detach().double().numpy()
        else:
            pos = module.qkv.weight[:DIM][rows].detach().double().numpy()
            neg = module.q_neg.weight[rows].detach().double().numpy()
        expected = independent_angles(pos, neg)
        np.testing.assert_allclose(np.sort(r["angles_deg"]), expected, atol=1e-6)
        assert r["mean_deg"] == pytest.approx(expected.mean()) and r["min_deg"] == pytest.approx(expected.min())
        frob = (pos * neg).sum() / np.sqrt((pos ** 2).sum() * (neg ** 2).sum())
        assert r["frobenius"] == pytest.approx(frob) and r["frobenius_abs"] == pytest.approx(abs(frob))
        assert r["alpha"] == pytest.approx(module.neg_scalers[r["head"]].item())
    # V- partly copies V+ here: those angles are smaller than Q+/Q-'s (independent random).
    v = np.mean([r["mean_deg"] for r in records if r["pair"] == "v"])
    q = np.mean([r["mean_deg"] for r in records if r["pair"] == "q"])
    assert v < q


def test_softmax_models_have_no_records():
    torch.manual_seed(0)
    net = TimeSformer(num_classes=3, img_size=16, num_frames=2, patch_size=8, embed_dim=DIM, depth=1,
                      num_heads=HEADS, attention="softmax")
    assert subspace_records(net) == []


def test_intruder_dimensions_of_a_known_case():
    d = 64
    reference = torch.diag(torch.linspace(1.0, 2.0, d))  # left singular vectors: the axes
    assert intruder_dimensions(reference.clone(), reference)["intruders"] == 0
    spread = torch.ones(d) / d ** 0.5  # |cos| to every axis: 1/8, below 0.5
    new = reference + 50.0 * torch.outer(spread, spread)
    found = intruder_dimensions(new, reference, k=10, epsilon=0.5)
    assert 0 in found["indices"]  # the new top direction is an intruder
    assert found["max_cos"][0] == pytest.approx(1 / 8, abs=0.01)  # nearly the spread vector
    # epsilon below 1/8: not an intruder any more.
    assert 0 not in intruder_dimensions(new, reference, k=10, epsilon=0.1)["indices"]
    # Records of a model against itself: no intruder in any matrix.
    net = tiny_dna()
    records = intruder_records(net, net, k=4)
    assert {r["matrix"] for r in records} == {"q_pos", "v_pos", "q_neg", "v_neg"}
    assert all(r["intruders"] == 0 for r in records)


def test_analyze_subspaces_writes_records_heat_map_and_reference_comparison(tmp_path, tiny_checkpoint):
    from dna_video.tools.analyze import main

    ckpt, _ = tiny_checkpoint
    # The reference: the same checkpoint with alpha changed (a stand-in for the start of fine-tuning).
    state = torch.load(ckpt, weights_only=False)
    for key in state["state_dict"]:
        if key.endswith("neg_scalers"):
            state["state_dict"][key] = state["state_dict"][key] - 0.25
    reference = tmp_path / "reference.ckpt"
    torch.save(state, reference)
    out = tmp_path / "out"
    assert main(["subspaces", str(ckpt), "--reference", str(reference), "--out", str(out)]) == 0
    records = json.loads((out / "subspaces.json").read_text())
    assert isinstance(records, list) and len(records) == 2 * 2 * 2  # 1 block x 2 kinds x 2 heads x 2 pairs
    for r in records:
        assert {"module", "layer", "kind", "head", "pair", "angles_deg", "mean_deg", "min_deg", "frobenius",
                "frobenius_abs", "alpha"} <= set(r)
        assert r["change"]["alpha"] == pytest.approx(0.25) and r["change"]["mean_deg"] == pytest.approx(0.0)
    intruders = json.loads((out / "intruders.json").read_text())
    assert intruders and all(r["intruders"] == 0 for r in intruders)  # same weights but alpha
    image = Image.open(out / "subspaces.png")
    assert image.width > 300 and np.asarray(image.convert("RGB")).std() > 10
