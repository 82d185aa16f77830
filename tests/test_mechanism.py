"""The mechanism measures per spatial block and head (issue 21, point 7): region mass relative
to area for each map, the correlation of the positive and negative maps, cos(q+, -q-) of the
cls query and the norm of the negative branch's output relative to the positive one's, against
a computation written out here from the attention inputs and the weights (float64), and on
hand-built modules whose answer is known (Q- = -Q+: cos 1 and one map; Q- tied: cos -1;
alpha 0: ratio 0; a constant score: mass as area)."""

import math

import pytest
import torch
from einops import rearrange

from dna_video.analysis.denoising import mechanism_rows, measure_mechanism
from dataclasses import replace

from dna_video.models.attention import NegativeBranch, attention_kind, attention_kinds
from dna_video.models.attention import registry
from dna_video.models.timesformer import TimeSformer

PATCH, SIDE, FRAMES, DIM, HEADS = 8, 16, 2, 16, 2


def network(kind: str, seed: int = 0) -> TimeSformer:
    net = TimeSformer(num_classes=3, img_size=SIDE, num_frames=FRAMES, patch_size=PATCH, embed_dim=DIM, depth=2,
                      num_heads=HEADS, attention=kind, drop_path_rate=0.0)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    return net.double().eval()


def batch(seed: int = 1) -> dict:
    """2 videos x 2 views; an actor and two distractors whose pixels cover whole and partial
    patches, moving between frames; one view without distractors."""
    g = torch.Generator().manual_seed(seed)
    video = torch.randn(2, 2, 3, FRAMES, SIDE, SIDE, generator=g, dtype=torch.float64)
    masks = torch.zeros(2, 2, 3, FRAMES, SIDE, SIDE, dtype=torch.uint8)
    masks[:, :, 0, 0, 0:8, 0:12] = 1  # actor: patch (0, 0) and half of (0, 1)
    masks[:, :, 0, 1, 4:12, 4:12] = 1  # a quarter of each patch
    masks[:, :, 1, 0, 8:16, 8:16] = 1
    masks[:, :, 2, 1, 12:16, 0:16] = 1
    masks[1, 0, 1:] = 0  # no distractor in this view
    return {"video": video, "masks": masks, "label": torch.tensor([0, 2])}


# -- the written-out computation ------------------------------------------------------------------
def softmax_rows(scores):
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def heads_of(kind, attn, x):
    """Per head, from the attention's input x (frames, 1 + n, D): the maps' cls rows over the
    patches (frames, n), the positive query and the negative map's softmax query at the cls
    token, and each branch's signed output at the cls token (the formula of each kind)."""
    out = []
    if kind == "diff":
        d = DIM // HEADS
        q, k, v = (x @ w.T for w in attn.qkv.weight.split(DIM))
        lam = (math.exp((attn.lambda_q1 @ attn.lambda_k1).item()) - math.exp((attn.lambda_q2 @ attn.lambda_k2).item())
               + attn.lambda_init)
        for i in range(HEADS // 2):
            g1, g2 = slice(2 * i * d, (2 * i + 1) * d), slice((2 * i + 1) * d, (2 * i + 2) * d)
            a1 = softmax_rows(q[..., g1] @ k[..., g1].transpose(-1, -2) / math.sqrt(d))
            a2 = softmax_rows(q[..., g2] @ k[..., g2].transpose(-1, -2) / math.sqrt(d))
            value = v[..., 2 * i * d: 2 * (i + 1) * d]
            out.append(dict(maps=[a1[:, 0, 1:], a2[:, 0, 1:]], q_pos=q[:, 0, g1], q_neg=q[:, 0, g2],
                            o_pos=(a1 @ value)[:, 0], o_neg=-lam * (a2 @ value)[:, 0]))
        return out
    d = DIM // HEADS
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(DIM, dim=-1)
    for i in range(HEADS):
        s = slice(i * d, (i + 1) * d)
        scores = q[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d)
        if kind in ("softmax", "cog"):
            if kind == "cog" and not attn.keeps_softmax:
                weights = softmax_rows(scores.abs())  # |sign(p) softmax(|p|)|
            else:
                weights = softmax_rows(scores)
            out.append(dict(maps=[weights[:, 0, 1:]]))
            continue
        q_neg = q if kind == "dna_tied_q" else x @ attn.q_neg.weight.T + attn.q_neg.bias
        v_neg = v if kind == "dna_shared_v" else x @ attn.v_neg.weight.T + attn.v_neg.bias
        sign = -1.0 if kind == "dna_shared_v" else 1.0
        positive = softmax_rows(scores)
        negative = softmax_rows(-(q_neg[..., s] @ k[..., s].transpose(-1, -2)) / math.sqrt(d))
        out.append(dict(maps=[positive[:, 0, 1:], negative[:, 0, 1:]], q_pos=q[:, 0, s], q_neg=-q_neg[:, 0, s],
                        o_pos=(positive @ v[..., s])[:, 0],
                        o_neg=sign * attn.neg_scalers[i] * (negative @ v_neg[..., s])[:, 0]))
    return out


def shares_by_hand(masks):
    """(views, 3 regions, T, patches): the part of each patch each region covers, by slicing."""
    views, regions = masks.shape[0], masks.shape[1]
    out = torch.zeros(views, 3, FRAMES, (SIDE // PATCH) ** 2, dtype=torch.float64)
    for view in range(views):
        for t in range(FRAMES):
            for p in range(out.shape[-1]):
                r, c = divmod(p, SIDE // PATCH)
                cell = masks[view, :, t, r * PATCH:(r + 1) * PATCH, c * PATCH:(c + 1) * PATCH].double()
                actor = cell[0].mean()
                distractors = sum(cell[m].mean() for m in range(1, regions))
                out[view, :, t, p] = torch.stack([actor, distractors, 1 - actor - distractors])
    return out


def expected(kind, net, data):
    inputs = {}
    hooks = [block.norm1.register_forward_hook(lambda m, a, o, i=i: inputs.__setitem__(i, o))
             for i, block in enumerate(net.blocks)]
    with torch.no_grad():
        net(rearrange(data["video"], "b v c t h w -> (b v) c t h w"))
    for h in hooks:
        h.remove()
    shares = shares_by_hand(rearrange(data["masks"], "b v m t h w -> (b v) m t h w"))
    views = shares.shape[0]
    area = shares.sum(dim=(2, 3)).mean(0) / ((SIDE // PATCH) ** 2 * FRAMES)
    result = {"area": area, "mass": {}, "map_correlation": [], "query_cosine": [], "output_norm_ratio": []}
    names = ["positive", "negative"] if kind not in ("softmax", "cog") else ["softmax"]
    for i, block in enumerate(net.blocks):
        per_head = heads_of(kind, block.attn, inputs[i])
        for m, name in enumerate(names):
            mass = torch.zeros(len(per_head), 3, dtype=torch.float64)
            for h, head in enumerate(per_head):
                rows = rearrange(head["maps"][m], "(v t) n -> v t n", t=FRAMES)
                for view in range(views):
                    weights = rows[view]
                    mass[h] += (weights[None] * shares[view]).sum(dim=(1, 2)) / weights.sum() / views
            result["mass"].setdefault(name, []).append(mass)
        if len(names) == 2:
            correlation, cosine, ratio = [], [], []
            for head in per_head:
                pos, neg = (rearrange(mp, "(v t) n -> v (t n)", t=FRAMES) for mp in head["maps"])
                correlation.append(sum(torch.corrcoef(torch.stack([pos[v], neg[v]]))[0, 1] for v in range(views)) / views)
                cos = (head["q_pos"] * head["q_neg"]).sum(-1) / (head["q_pos"].norm(dim=-1) * head["q_neg"].norm(dim=-1))
                cosine.append(cos.mean())
                ratio.append(head["o_neg"].norm(dim=-1).sum() / head["o_pos"].norm(dim=-1).sum())
            result["map_correlation"].append(torch.stack(correlation))
            result["query_cosine"].append(torch.stack(cosine))
            result["output_norm_ratio"].append(torch.stack(ratio))
    result["mass"] = {name: torch.stack(values) for name, values in result["mass"].items()}
    for key in ("map_correlation", "query_cosine", "output_norm_ratio"):
        result[key] = torch.stack(result[key]) if result[key] else None
    return result


@pytest.mark.parametrize("kind", attention_kinds())
def test_measures_equal_the_written_out_computation(kind):
    if not attention_kind(kind).module.__module__.startswith("dna_video."):
        pytest.skip("a kind another test file registers (its formula is not written out here)")
    net, data = network(kind), batch()
    got = measure_mechanism(net, [data])
    want = expected(kind, net, data)
    assert got["views"] == 4 and got["labels"].tolist() == [0, 2]
    # The measured pass computes the network's own function (terms summed as in forward).
    with torch.no_grad():
        logits = net(rearrange(data["video"], "b v c t h w -> (b v) c t h w"))
    torch.testing.assert_close(got["probs"], rearrange(logits, "(b v) k -> b v k", v=2).mean(1).softmax(-1))
    torch.testing.assert_close(got["area"], want["area"])
    assert set(got["mass"]) == set(want["mass"])
    for name, mass in want["mass"].items():
        torch.testing.assert_close(got["mass"][name], mass)
        torch.testing.assert_close(got["mass_relative"][name], mass / want["area"])
    if want["map_correlation"] is None:
        assert "map_correlation" not in got and "query_cosine" not in got
        return
    torch.testing.assert_close(got["map_correlation"], want["map_correlation"])
    assert got["map_correlation_views"].eq(4).all()
    torch.testing.assert_close(got["query_cosine"], want["query_cosine"])
    torch.testing.assert_close(got["output_norm_ratio"], want["output_norm_ratio"])
    assert got["modules_without_terms"] == []
    # The measures are not trivial on these random weights.
    assert (got["map_correlation"].abs() < 0.99).all() and (got["output_norm_ratio"] > 0).all()


def test_negative_query_minus_positive_gives_cosine_one_and_one_map():
    """Q- = -Q+ (the learned degeneracy): softmin(Q- K) = softmax(Q+ K), so both maps are one,
    their correlation is 1, cos(q+, -q-) is 1, and their region masses agree."""
    net = network("dna")
    with torch.no_grad():
        for block in net.blocks:
            attn = block.attn
            attn.q_neg.weight.copy_(-attn.qkv.weight[:DIM])
            attn.q_neg.bias.copy_(-attn.qkv.bias[:DIM])
    got = measure_mechanism(net, [batch()])
    torch.testing.assert_close(got["query_cosine"], torch.ones(2, HEADS, dtype=torch.float64))
    torch.testing.assert_close(got["map_correlation"], torch.ones(2, HEADS, dtype=torch.float64))
    torch.testing.assert_close(got["mass"]["negative"], got["mass"]["positive"])


def test_tied_query_gives_cosine_minus_one_and_zero_alpha_a_zero_ratio():
    net = network("dna_tied_q")
    with torch.no_grad():
        net.blocks[1].attn.neg_scalers.zero_()
    got = measure_mechanism(net, [batch()])
    torch.testing.assert_close(got["query_cosine"], -torch.ones(2, HEADS, dtype=torch.float64))
    assert got["output_norm_ratio"][1].eq(0).all() and (got["output_norm_ratio"][0] > 0).all()
    # The least similar keys: the maps are anti-correlated on these weights.
    assert (got["map_correlation"] < 0).all()


def test_uniform_attention_has_mass_equal_to_area():
    """Queries of zero: every score 0, uniform maps: the mass on each region is its area
    (relative mass 1 for the actor and background; the distractors, absent from one view, too
    on average); the correlation of two constant maps is undefined and counted as such."""
    net = network("dna")
    with torch.no_grad():
        for block in net.blocks:
            block.attn.qkv.weight[:DIM].zero_()
            block.attn.qkv.bias[:DIM].zero_()
            block.attn.q_neg.weight.zero_()
            block.attn.q_neg.bias.zero_()
    got = measure_mechanism(net, [batch()])
    for name in ("positive", "negative"):
        torch.testing.assert_close(got["mass_relative"][name], torch.ones(2, HEADS, 3, dtype=torch.float64))
    assert got["map_correlation"].isnan().all() and got["map_correlation_views"].eq(0).all()


def test_rows_hold_every_value_once():
    net = network("dna")
    got = measure_mechanism(net, [batch()])
    rows = mechanism_rows(got)
    # 2 maps x 2 measures x 2 blocks x 2 heads x 3 regions, then 3 measures x 2 blocks x 2 heads.
    assert len(rows) == 2 * 2 * 2 * HEADS * 3 + 3 * 2 * HEADS
    row = next(r for r in rows if r["measure"] == "mass_relative" and r["map"] == "negative" and r["block"] == 1
               and r["head"] == 0 and r["region"] == "distractors")
    assert row["value"] == float(got["mass_relative"]["negative"][1, 0, 1])
    row = next(r for r in rows if r["measure"] == "query_cosine" and r["block"] == 0 and r["head"] == 1)
    assert row["value"] == float(got["query_cosine"][0, 1])


def test_a_kind_without_terms_gets_masses_and_correlation_and_is_named(monkeypatch):
    """What is measured follows the registry's facts: with no per-head terms method declared,
    masses and the maps' correlation are measured, cos and the norm ratio are not, and the
    modules are listed."""
    dna = attention_kind("dna")
    monkeypatch.setitem(registry._KINDS, "dna", replace(dna, negative=NegativeBranch(terms=None)))
    net, data = network("dna"), batch()
    got = measure_mechanism(net, [data])
    want = expected("dna", net, data)
    assert got["modules_without_terms"] == ["blocks.0.attn", "blocks.1.attn"]
    assert "query_cosine" not in got and "output_norm_ratio" not in got
    torch.testing.assert_close(got["map_correlation"], want["map_correlation"])
    torch.testing.assert_close(got["mass"]["negative"], want["mass"]["negative"])


def test_no_video_is_an_error():
    with pytest.raises(ValueError, match="no video"):
        measure_mechanism(network("softmax"), [{"video": None}])
