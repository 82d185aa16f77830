"""DnA and softmax attention against plain written-out computations."""

import math

import pytest
import torch

from dna_video.models.attention import ATTENTIONS, DenoisingAttention, SoftmaxAttention, build_attention


def reference_dna(x, attn: DenoisingAttention):
    """Per head, term by term: softmax(Q+ K^T/sqrt d) V+ + alpha_h * softmin(Q- K^T/sqrt d) V-,
    then the output projection. Written with explicit loops and exp/sum, no library softmax."""
    d_model, h = attn.dim, attn.num_heads
    d = d_model // h
    w_q, w_k, w_v = attn.qkv.weight.split(d_model)
    b_q, b_k, b_v = attn.qkv.bias.split(d_model)
    q_pos = x @ w_q.T + b_q
    k = x @ w_k.T + b_k
    v_pos = x @ w_v.T + b_v
    q_neg = x @ attn.q_neg.weight.T + attn.q_neg.bias
    v_neg = x @ attn.v_neg.weight.T + attn.v_neg.bias
    heads = []
    for i in range(h):
        s = slice(i * d, (i + 1) * d)
        scores_pos = q_pos[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d)
        scores_neg = q_neg[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d)
        e_pos = torch.exp(scores_pos - scores_pos.amax(-1, keepdim=True))
        e_neg = torch.exp(-scores_neg - (-scores_neg).amax(-1, keepdim=True))  # softmin
        pos = (e_pos / e_pos.sum(-1, keepdim=True)) @ v_pos[..., s]
        neg = (e_neg / e_neg.sum(-1, keepdim=True)) @ v_neg[..., s]
        heads.append(pos + attn.neg_scalers[i] * neg)
    return torch.cat(heads, dim=-1) @ attn.proj.weight.T + attn.proj.bias


def reference_mhsa(x, attn: SoftmaxAttention):
    d_model, h = attn.dim, attn.num_heads
    d = d_model // h
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(d_model, dim=-1)
    heads = []
    for i in range(h):
        s = slice(i * d, (i + 1) * d)
        scores = q[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d)
        e = torch.exp(scores - scores.amax(-1, keepdim=True))
        heads.append((e / e.sum(-1, keepdim=True)) @ v[..., s])
    return torch.cat(heads, dim=-1) @ attn.proj.weight.T + attn.proj.bias


def randomise(module, seed=0):
    """Random weights everywhere (alpha too, with mixed signs) so no term is trivially zero."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return module


SHAPES = [(2, 7, 16, 2), (3, 8, 48, 3), (1, 197, 64, 4), (5, 1, 24, 6)]


@pytest.mark.parametrize("batch,length,dim,heads", SHAPES)
def test_dna_fused_equals_written_out_float64(batch, length, dim, heads):
    attn = randomise(DenoisingAttention(dim, heads)).double().eval()
    x = torch.randn(batch, length, dim, dtype=torch.float64)
    expected = reference_dna(x, attn)
    torch.testing.assert_close(attn(x), expected, atol=1e-10, rtol=1e-10)
    out, maps = attn.forward_with_maps(x)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)
    assert maps["positive"].shape == maps["negative"].shape == (batch, heads, length, length)


@pytest.mark.parametrize("batch,length,dim,heads", SHAPES)
def test_dna_fused_equals_written_out_float32(batch, length, dim, heads):
    attn = randomise(DenoisingAttention(dim, heads), seed=1).eval()
    x = torch.randn(batch, length, dim)
    expected = reference_dna(x.double(), attn.double()).float()
    attn.float()
    # float32 accumulation over up to 197 keys: agree to a few float32 ulps of the output scale.
    torch.testing.assert_close(attn(x), expected, atol=5e-5, rtol=1e-4)


def test_dna_maps_are_softmax_and_softmin():
    attn = randomise(DenoisingAttention(32, 4), seed=2).double().eval()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    _, maps = attn.forward_with_maps(x)
    for m in maps.values():
        torch.testing.assert_close(m.sum(-1), torch.ones_like(m.sum(-1)))
    # softmin puts most weight where the negative query's score is LOWEST.
    q = (x @ attn.q_neg.weight.T + attn.q_neg.bias).unflatten(-1, (4, 8)).transpose(1, 2)
    k = (x @ attn.qkv.weight[32:64].T + attn.qkv.bias[32:64]).unflatten(-1, (4, 8)).transpose(1, 2)
    scores = q @ k.transpose(-1, -2)
    assert torch.equal(maps["negative"].argmax(-1), scores.argmin(-1))


@pytest.mark.parametrize("batch,length,dim,heads", SHAPES[:3])
def test_softmax_attention_equals_written_out(batch, length, dim, heads):
    attn = randomise(SoftmaxAttention(dim, heads), seed=3).double().eval()
    x = torch.randn(batch, length, dim, dtype=torch.float64)
    torch.testing.assert_close(attn(x), reference_mhsa(x, attn), atol=1e-10, rtol=1e-10)
    out, maps = attn.forward_with_maps(x)
    torch.testing.assert_close(out, attn(x), atol=1e-10, rtol=1e-10)


def test_dna_with_zero_alpha_is_softmax_attention():
    dna = randomise(DenoisingAttention(48, 3, alpha_init=0.0), seed=4).eval()
    with torch.no_grad():
        dna.neg_scalers.zero_()
    softmax = SoftmaxAttention(48, 3).eval()
    missing, unexpected = softmax.load_state_dict(dna.state_dict(), strict=False)
    assert not missing and set(unexpected) == {"q_neg.weight", "q_neg.bias", "v_neg.weight", "v_neg.bias", "neg_scalers"}
    x = torch.randn(4, 11, 48)
    torch.testing.assert_close(dna(x), softmax(x), atol=1e-6, rtol=1e-6)


def test_dna_gradients_reach_every_parameter():
    attn = DenoisingAttention(32, 4)
    x = torch.randn(2, 10, 32, requires_grad=True)
    (attn(x) ** 2).sum().backward()
    for name, p in attn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0
    # alpha's gradient is the one the written-out formula gives.
    ref = DenoisingAttention(32, 4)
    ref.load_state_dict(attn.state_dict())
    (reference_dna(x.detach(), ref) ** 2).sum().backward()
    torch.testing.assert_close(attn.neg_scalers.grad, ref.neg_scalers.grad, atol=1e-4, rtol=1e-4)


def test_dna_parameter_layout_matches_reference():
    attn = DenoisingAttention(64, 4, alpha_init=0.25)
    shapes = {k: tuple(v.shape) for k, v in attn.state_dict().items()}
    assert shapes == {
        "qkv.weight": (192, 64), "qkv.bias": (192,), "q_neg.weight": (64, 64), "q_neg.bias": (64,),
        "v_neg.weight": (64, 64), "v_neg.bias": (64,), "proj.weight": (64, 64), "proj.bias": (64,),
        "neg_scalers": (4,),
    }
    assert torch.equal(attn.neg_scalers, torch.full((4,), 0.25))
    # Extra parameters over softmax attention: 2 * (dim^2 + dim) (dna.md).
    extra = sum(p.numel() for p in attn.parameters()) - sum(p.numel() for p in SoftmaxAttention(64, 4).parameters())
    assert extra == 2 * (64 * 64 + 64) + 4


def test_build_attention_selects_by_name_and_rejects_unknown():
    assert set(ATTENTIONS) >= {"softmax", "dna"}
    assert isinstance(build_attention("dna", 32, 2, alpha_init=0.1), DenoisingAttention)
    assert isinstance(build_attention("softmax", 32, 2), SoftmaxAttention)
    with pytest.raises(ValueError, match="unknown attention 'flash'"):
        build_attention("flash", 32, 2)
    with pytest.raises(ValueError, match="not divisible"):
        build_attention("dna", 30, 4)


def _grads(module, x, out_grad, forward):
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    forward(module, x).backward(out_grad)
    return {"x": x.grad, **{name: p.grad for name, p in module.named_parameters()}}


@pytest.mark.parametrize("explicit_max_len", [0, 10**6], ids=["fused_kernel", "explicit"])
@pytest.mark.parametrize("batch,length,dim,heads", SHAPES)
@pytest.mark.parametrize("kind", ["dna", "softmax"])
def test_training_path_gradients_equal_written_out(
    kind, batch, length, dim, heads, explicit_max_len, monkeypatch
):
    """Both training paths (fused kernel; explicit batched matmuls for short sequences), with
    the DnA projection's hand-written backward: every gradient, alpha's included, equals
    autograd's through the term-by-term formula, in float64."""
    monkeypatch.setattr(ATTENTIONS[kind], "explicit_max_len", explicit_max_len)
    attn = randomise(build_attention(kind, dim, heads), seed=5).double()
    reference = reference_dna if kind == "dna" else reference_mhsa
    x = torch.randn(batch, length, dim, dtype=torch.float64)
    g = torch.randn(batch, length, dim, dtype=torch.float64)
    ours = _grads(attn, x, g, lambda m, x: m(x))
    expected = _grads(attn, x, g, lambda m, x: reference(x, m))
    assert ours.keys() == expected.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], expected[name], atol=1e-10, rtol=1e-10, msg=name)


def test_dna_without_bias_equals_zero_bias_and_input_without_grad():
    """qkv_bias=False equals zero biases, outputs and weight gradients; with an input that
    needs no gradient (only parameters do) the backward skips the input's GEMM."""
    no_bias = randomise(DenoisingAttention(24, 3, qkv_bias=False), seed=6).double()
    zero_bias = DenoisingAttention(24, 3).double()
    with torch.no_grad():
        for name, p in zero_bias.named_parameters():
            p.copy_(no_bias.state_dict()[name] if name in no_bias.state_dict() else torch.zeros_like(p))
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    g = torch.randn(2, 5, 24, dtype=torch.float64)
    for m in (no_bias, zero_bias):
        m(x).backward(g)
    torch.testing.assert_close(no_bias(x), zero_bias(x))
    for name, p in no_bias.named_parameters():
        torch.testing.assert_close(p.grad, zero_bias.get_parameter(name).grad, msg=name)


def test_dna_bf16_autocast_matches_plain_autograd():
    """Under bf16 autocast the hand-written backward runs its GEMMs in bf16 like autocast
    would: gradients agree with the plain-autograd formula to bf16 precision, in float32."""
    torch.manual_seed(0)
    attn = randomise(DenoisingAttention(64, 4), seed=7)
    x = torch.randn(2, 33, 64)
    g = torch.randn(2, 33, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = _grads(attn, x, g, lambda m, x: m(x).float())
    expected = _grads(attn, x, g, lambda m, x: reference_dna(x, m))
    for name, grad in ours.items():
        assert grad.dtype == torch.float32, name
        scale = expected[name].abs().max()
        assert (grad - expected[name]).abs().max() <= 0.05 * scale, name
        # Per tensor, the relative error of the whole gradient: bf16 GEMMs give at most 1.9%
        # here (x, Q+/K/V+, Q-), alpha 0.9%; a 4% error in alpha's gradient would not pass.
        relative = ((grad - expected[name]).norm() / expected[name].norm()).item()
        assert relative <= 0.025, (name, relative)


def _saved_shapes(module, x):
    params = {p.data_ptr() for p in module.parameters()}
    shapes = []

    def pack(t):
        if t.data_ptr() not in params:
            shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return shapes


@pytest.mark.parametrize("kind", ["dna", "dna_tied_q", "softmax"])
def test_training_keeps_no_attention_map_nor_fused_weight(kind):
    """Past the short-sequence threshold nothing L x L is kept for backward, and DnA does not
    keep its fused (5D x D) projection weight either."""
    dim, heads, length = 32, 2, 40
    assert length > ATTENTIONS[kind].explicit_max_len
    x = torch.randn(3, length, dim, requires_grad=True)
    shapes = _saved_shapes(build_attention(kind, dim, heads), x)
    assert shapes, "nothing saved: the test would not see anything"
    for shape in shapes:
        assert shape[-2:] != (length, length), shape
        assert shape != (5 * dim, dim), shape


def test_dna_frozen_projections_still_pass_the_input_gradient():
    attn = randomise(DenoisingAttention(16, 2), seed=8).double()
    for p in attn.parameters():
        p.requires_grad_(False)
    x = torch.randn(2, 6, 16, dtype=torch.float64, requires_grad=True)
    (attn(x) ** 2).sum().backward()
    expected = x.detach().clone().requires_grad_()
    (reference_dna(expected, attn) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, expected.grad)
    assert all(p.grad is None for p in attn.parameters())
