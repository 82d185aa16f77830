"""Cross-attention for probes: DnA against the formula written out in float64 (outputs and
gradients, fused and explicit paths), softmax against torch's MultiheadAttention, and the
initialisation from a self-attention."""

import math

import pytest
import torch
from scipy.linalg import subspace_angles

from dna_video.models.attention import DenoisingAttention, SoftmaxAttention
from dna_video.models.attention import (
    DenoisingCrossAttention,
    SoftmaxCrossAttention,
    build_cross_attention,
    init_from_self_attention,
)

DIM, HEADS = 16, 4


def randomise(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            # alphas of both signs and away from 0, so the negative branch counts
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * (1.0 if "neg_scalers" in name else 0.5))
    return module


def tokens(b, n, seed, dtype=torch.float64):
    return torch.randn(b, n, DIM, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def linear(x, layer, rows=slice(None)):
    return x @ layer.weight[rows].T + layer.bias[rows]


def written_out_dna(m, queries, context):
    """The DnA formula head by head with explicit exponentials (independent of the module's
    code paths): sum_h [softmax(Q+ K^T/sqrt d) V+ + alpha_h softmin(Q- K^T/sqrt d) V-] W_proj."""
    d = DIM // HEADS
    heads = []
    for h in range(HEADS):
        rows = slice(h * d, (h + 1) * d)
        q_pos, q_neg = linear(queries, m.q, rows), linear(queries, m.q_neg, rows)
        k = linear(context, m.kv, slice(h * d, (h + 1) * d))
        v_pos = linear(context, m.kv, slice(DIM + h * d, DIM + (h + 1) * d))
        v_neg = linear(context, m.v_neg, rows)
        s_pos = q_pos @ k.transpose(-1, -2) / math.sqrt(d)
        s_neg = q_neg @ k.transpose(-1, -2) / math.sqrt(d)
        e_pos = torch.exp(s_pos - s_pos.amax(-1, keepdim=True))
        e_neg = torch.exp(-s_neg - (-s_neg).amax(-1, keepdim=True))  # softmin = softmax(-s)
        heads.append((e_pos / e_pos.sum(-1, keepdim=True)) @ v_pos
                     + m.neg_scalers[h] * (e_neg / e_neg.sum(-1, keepdim=True)) @ v_neg)
    return linear(torch.cat(heads, -1), m.proj)


@pytest.mark.parametrize("path", ["forward", "forward_with_maps"])
def test_dna_cross_attention_equals_the_written_out_formula_with_gradients(path):
    m = randomise(DenoisingCrossAttention(DIM, HEADS).double())
    queries = tokens(2, 5, 1).requires_grad_()
    context = tokens(2, 23, 2).requires_grad_()
    out = m(queries, context) if path == "forward" else m.forward_with_maps(queries, context)[0]
    ref_module = randomise(DenoisingCrossAttention(DIM, HEADS).double())  # same values, own graph
    q2, c2 = queries.detach().clone().requires_grad_(), context.detach().clone().requires_grad_()
    ref = written_out_dna(ref_module, q2, c2)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)

    upstream = tokens(2, 5, 3)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    torch.testing.assert_close(queries.grad, q2.grad, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(context.grad, c2.grad, atol=1e-12, rtol=1e-10)
    for (name, p), p_ref in zip(m.named_parameters(), ref_module.parameters()):
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        torch.testing.assert_close(p.grad, p_ref.grad, atol=1e-12, rtol=1e-10, msg=name)


def test_dna_maps_are_row_stochastic_and_the_negative_one_is_softmin():
    m = randomise(DenoisingCrossAttention(DIM, HEADS).double())
    queries, context = tokens(1, 3, 4), tokens(1, 9, 5)
    _, maps = m.forward_with_maps(queries, context)
    assert maps["positive"].shape == maps["negative"].shape == (1, HEADS, 3, 9)
    for a in maps.values():
        torch.testing.assert_close(a.sum(-1), torch.ones(1, HEADS, 3, dtype=torch.float64))
    # The negative map favours the keys with the LOWEST Q- . K score.
    d = DIM // HEADS
    k = linear(context, m.kv, slice(0, d))
    score = linear(queries, m.q_neg, slice(0, d)) @ k.transpose(-1, -2)
    assert torch.equal(maps["negative"][0, 0].argmax(-1), score[0].argmin(-1))


def test_softmax_cross_attention_equals_torch_multihead_attention():
    m = randomise(SoftmaxCrossAttention(DIM, HEADS).double())
    mha = torch.nn.MultiheadAttention(DIM, HEADS, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([m.q.weight, m.kv.weight]))
        mha.in_proj_bias.copy_(torch.cat([m.q.bias, m.kv.bias]))
        mha.out_proj.load_state_dict(m.proj.state_dict())
    queries, context = tokens(2, 4, 6), tokens(2, 17, 7)
    expected, weights = mha(queries, context, context, average_attn_weights=False)
    torch.testing.assert_close(m(queries, context), expected)
    out, maps = m.forward_with_maps(queries, context)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(maps["attn"], weights)


def test_initialised_from_a_self_attention_it_computes_that_attention_on_the_same_tokens():
    x = tokens(2, 11, 8, torch.float32)
    softmax_self = randomise(SoftmaxAttention(DIM, HEADS), seed=1).eval()
    cross = build_cross_attention("softmax", DIM, HEADS)
    init_from_self_attention(cross, softmax_self)
    torch.testing.assert_close(cross(x, x), softmax_self(x))

    dna_self = randomise(DenoisingAttention(DIM, HEADS), seed=2).eval()
    cross = build_cross_attention("dna", DIM, HEADS, alpha_init=0.5)
    init_from_self_attention(cross, dna_self, neg_init="copy")
    torch.testing.assert_close(cross(x, x), dna_self(x))
    torch.testing.assert_close(cross.neg_scalers, dna_self.neg_scalers)
    # Queries from other tokens: the probes' use. Only the first query row differs here.
    probes = x[:, :3].clone()
    probes[:, 0] += 1.0
    assert torch.allclose(cross(probes, x)[:, 1:], dna_self(x)[:, 1:3], atol=1e-6)
    assert not torch.allclose(cross(probes, x)[:, 0], dna_self(x)[:, 0], atol=1e-3)

    with pytest.raises(ValueError, match="'copy' takes Q-, V- from a DnA self-attention"):
        init_from_self_attention(cross, softmax_self, neg_init="copy")
    with pytest.raises(ValueError, match="unknown neg_init 'zeros'"):
        init_from_self_attention(cross, softmax_self, neg_init="zeros")


def test_scaled_copy_starts_as_the_softmax_attention_up_to_eps():
    x = tokens(2, 11, 9, torch.float64)
    softmax_self = randomise(SoftmaxAttention(DIM, HEADS).double(), seed=3).eval()
    cross = build_cross_attention("dna", DIM, HEADS).double()
    init_from_self_attention(cross, softmax_self, neg_init="scaled_copy", eps=1e-4)
    d = DIM
    torch.testing.assert_close(cross.q_neg.weight, 1e-4 * softmax_self.qkv.weight[:d])
    torch.testing.assert_close(cross.v_neg.weight, 1e-4 * softmax_self.qkv.weight[2 * d:])
    torch.testing.assert_close(cross.v_neg.bias, 1e-4 * softmax_self.qkv.bias[2 * d:])
    assert torch.equal(cross.neg_scalers, torch.full((HEADS,), 0.5, dtype=torch.float64))
    gap = (cross(x, x) - softmax_self(x)).abs().max()
    assert 0 < gap < 1e-3  # the negative branch is there, at O(eps)


def test_orthogonal_and_random_policies():
    softmax_self = randomise(SoftmaxAttention(DIM, HEADS), seed=4)
    cross = build_cross_attention("dna", DIM, HEADS)
    init_from_self_attention(cross, softmax_self, neg_init="orthogonal")
    d = DIM // HEADS
    v_pos, v_neg = cross.kv.weight[DIM:].detach(), cross.v_neg.weight.detach()
    for h in range(HEADS):
        rows = slice(h * d, (h + 1) * d)
        angles = subspace_angles(v_pos[rows].T.double().numpy(), v_neg[rows].T.double().numpy())
        assert angles.min() == pytest.approx(math.pi / 2, abs=1e-5)
    torch.testing.assert_close(torch.linalg.matrix_norm(v_neg), torch.linalg.matrix_norm(v_pos))

    init_from_self_attention(cross, softmax_self, neg_init="random")
    assert 0.01 < cross.q_neg.weight.std() < 0.03 and not cross.q_neg.bias.any()
    torch.testing.assert_close(cross.q.weight, softmax_self.qkv.weight[:DIM])


def test_unknown_kind_and_mismatched_widths_are_refused():
    with pytest.raises(ValueError, match="unknown cross-attention 'cog'"):
        build_cross_attention("cog", DIM, HEADS)
    with pytest.raises(ValueError, match="width 16 with 4 heads from a self-attention of width 32"):
        init_from_self_attention(build_cross_attention("softmax", DIM, HEADS), SoftmaxAttention(32, 4))
