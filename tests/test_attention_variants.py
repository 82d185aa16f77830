"""The attention variants (shared-value DnA, Differential, Cog) against plain written-out
computations in float64 (outputs and gradients, both training paths), against timm's
DiffAttention, and their placement per block and per path in the TimeSformer."""

import math

import pytest
import torch

from dna_video.models.attention import ATTENTIONS, SoftmaxAttention, build_attention
from dna_video.models.attention import (
    CogAttention,
    DifferentialAttention,
    SharedValueDnA,
    TiedQueryDnA,
    diff_lambda_init,
    kwargs_by_kind,
)
from dna_video.models.timesformer import timesformer


def softmax_rows(scores):
    """Softmax over the last axis written out: exp(s - max) / sum."""
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def reference_shared_v(x, attn: SharedValueDnA):
    """Per head: (softmax(Q+ K^T/sqrt d) - alpha_h softmin(Q- K^T/sqrt d)) V, then proj."""
    D, h = attn.dim, attn.num_heads
    d = D // h
    w_q, w_k, w_v = attn.qkv.weight.split(D)
    b_q, b_k, b_v = attn.qkv.bias.split(D)
    q_pos, k, v = x @ w_q.T + b_q, x @ w_k.T + b_k, x @ w_v.T + b_v
    q_neg = x @ attn.q_neg.weight.T + attn.q_neg.bias
    heads = []
    for i in range(h):
        s = slice(i * d, (i + 1) * d)
        pos = softmax_rows(q_pos[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d))
        neg = softmax_rows(-(q_neg[..., s] @ k[..., s].transpose(-1, -2)) / math.sqrt(d))  # softmin
        heads.append((pos - attn.neg_scalers[i] * neg) @ v[..., s])
    return torch.cat(heads, dim=-1) @ attn.proj.weight.T + attn.proj.bias


def reference_tied_q(x, attn: TiedQueryDnA):
    """Per head: softmax(Q K^T/sqrt d) V+ + alpha_h softmin(Q K^T/sqrt d) V-, then proj: both
    maps from the same scores, the negative one of their negation."""
    D, h = attn.dim, attn.num_heads
    d = D // h
    q, k, v_pos = (x @ attn.qkv.weight.T + attn.qkv.bias).split(D, dim=-1)
    v_neg = x @ attn.v_neg.weight.T + attn.v_neg.bias
    heads = []
    for i in range(h):
        s = slice(i * d, (i + 1) * d)
        scores = q[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d)
        heads.append(softmax_rows(scores) @ v_pos[..., s] + attn.neg_scalers[i] * softmax_rows(-scores) @ v_neg[..., s])
    return torch.cat(heads, dim=-1) @ attn.proj.weight.T + attn.proj.bias


def reference_diff(x, attn: DifferentialAttention):
    """Per differential head i of H/2: Q/K channel groups 2i (map 1) and 2i+1 (map 2) of
    width d, V channels [2d i, 2d (i+1)); (A1 - lambda A2) V, RMS-normalised over 2d with the
    affine weight, times (1 - lambda_init); heads concatenated, then proj."""
    D, d = attn.dim, attn.head_dim
    q, k, v = (x @ w.T for w in attn.qkv.weight.split(D))
    lam = (torch.exp((attn.lambda_q1 * attn.lambda_k1).sum()) - torch.exp((attn.lambda_q2 * attn.lambda_k2).sum())
           + attn.lambda_init)
    heads = []
    for i in range(attn.num_heads // 2):
        g1, g2 = slice(2 * i * d, (2 * i + 1) * d), slice((2 * i + 1) * d, (2 * i + 2) * d)
        a1 = softmax_rows(q[..., g1] @ k[..., g1].transpose(-1, -2) / math.sqrt(d))
        a2 = softmax_rows(q[..., g2] @ k[..., g2].transpose(-1, -2) / math.sqrt(d))
        o = (a1 - lam * a2) @ v[..., 2 * i * d: 2 * (i + 1) * d]
        o = o / torch.sqrt((o ** 2).mean(-1, keepdim=True) + 1e-5) * attn.sub_norm.weight
        heads.append(o * (1 - attn.lambda_init))
    return torch.cat(heads, dim=-1) @ attn.proj.weight.T + attn.proj.bias


def reference_cog(x, attn: CogAttention):
    """Per head: weights sign(p) * softmax(|p|), p = Q K^T / sqrt d (plain softmax in a module
    that keeps it), then proj."""
    D, h = attn.dim, attn.num_heads
    d = D // h
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(D, dim=-1)
    heads = []
    for i in range(h):
        s = slice(i * d, (i + 1) * d)
        p = q[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d)
        w = softmax_rows(p) if attn.keeps_softmax else torch.sign(p) * softmax_rows(p.abs())
        heads.append(w @ v[..., s])
    return torch.cat(heads, dim=-1) @ attn.proj.weight.T + attn.proj.bias


REFERENCES = {"dna_shared_v": reference_shared_v, "dna_tied_q": reference_tied_q, "diff": reference_diff,
              "cog": reference_cog}


def randomise(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return module


def make(kind, dim, heads, **kwargs):
    if kind == "cog":
        kwargs.setdefault("layer_index", 2)  # a middle block of 4: cog weights
        kwargs.setdefault("num_layers", 4)
    if kind == "diff":
        kwargs.setdefault("layer_index", 3)
    return randomise(build_attention(kind, dim, heads, **kwargs), seed=11).double()


def _grads(module, x, out_grad, forward):
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    forward(module, x).backward(out_grad)
    return {"x": x.grad, **{name: p.grad for name, p in module.named_parameters()}}


SHAPES = [(2, 7, 16, 2), (1, 40, 48, 4), (3, 1, 24, 2)]


@pytest.mark.parametrize("explicit_max_len", [0, 10**6], ids=["fused_kernel", "explicit"])
@pytest.mark.parametrize("batch,length,dim,heads", SHAPES)
@pytest.mark.parametrize("kind", ["dna_shared_v", "dna_tied_q", "diff", "cog"])
def test_variant_equals_written_out_float64(kind, batch, length, dim, heads, explicit_max_len, monkeypatch):
    """Training path (fused kernel or explicit matmuls) and forward_with_maps: outputs and
    every gradient equal autograd's through the written-out formula, in float64."""
    monkeypatch.setattr(ATTENTIONS[kind], "explicit_max_len", explicit_max_len)
    attn = make(kind, dim, heads)
    x = torch.randn(batch, length, dim, dtype=torch.float64)
    g = torch.randn(batch, length, dim, dtype=torch.float64)
    reference = REFERENCES[kind]
    expected = reference(x, attn)
    torch.testing.assert_close(attn(x), expected, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(attn.forward_with_maps(x)[0], expected, atol=1e-10, rtol=1e-10)
    ours = _grads(attn, x, g, lambda m, x: m(x))
    written = _grads(attn, x, g, lambda m, x: reference(x, m))
    maps = _grads(attn, x, g, lambda m, x: m.forward_with_maps(x)[0])
    assert ours.keys() == written.keys()
    for name in ours:
        # (With one token every map is 1: queries and keys get no gradient.)
        assert ours[name] is not None and (length == 1 or ours[name].abs().sum() > 0), name
        torch.testing.assert_close(ours[name], written[name], atol=1e-10, rtol=1e-10, msg=name)
        torch.testing.assert_close(maps[name], written[name], atol=1e-10, rtol=1e-10, msg=name)


def test_shared_v_maps_and_parameters():
    attn = make("dna_shared_v", 32, 4)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    _, maps = attn.forward_with_maps(x)
    for m in maps.values():
        torch.testing.assert_close(m.sum(-1), torch.ones_like(m.sum(-1)))
    shapes = {k: tuple(v.shape) for k, v in SharedValueDnA(32, 4).state_dict().items()}
    assert shapes == {"qkv.weight": (96, 32), "qkv.bias": (96,), "q_neg.weight": (32, 32), "q_neg.bias": (32,),
                      "proj.weight": (32, 32), "proj.bias": (32,), "neg_scalers": (4,)}
    # With alpha = 0 it is softmax attention.
    with torch.no_grad():
        attn.neg_scalers.zero_()
    softmax = SoftmaxAttention(32, 4).double()
    softmax.load_state_dict(attn.state_dict(), strict=False)
    torch.testing.assert_close(attn(x), softmax(x))


def test_tied_q_maps_parameters_and_dna_with_q_neg_equal_q_pos():
    attn = make("dna_tied_q", 32, 4)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    _, maps = attn.forward_with_maps(x)
    # The negative map is the softmin of the positive map's scores: per row, the key the
    # positive map weights least is the one the negative map weights most.
    assert torch.equal(maps["negative"].argmax(-1), maps["positive"].argmin(-1))
    torch.testing.assert_close(maps["negative"], softmax_rows(-torch.log(maps["positive"])))
    shapes = {k: tuple(v.shape) for k, v in TiedQueryDnA(32, 4).state_dict().items()}
    assert shapes == {"qkv.weight": (96, 32), "qkv.bias": (96,), "v_neg.weight": (32, 32), "v_neg.bias": (32,),
                      "proj.weight": (32, 32), "proj.bias": (32,), "neg_scalers": (4,)}
    # Another implementation: DnA whose Q- is a copy of Q+.
    dna = build_attention("dna", 32, 4).double()
    dna.load_state_dict(attn.state_dict(), strict=False)
    with torch.no_grad():
        dna.q_neg.weight.copy_(attn.qkv.weight[:32])
        dna.q_neg.bias.copy_(attn.qkv.bias[:32])
    torch.testing.assert_close(attn(x), dna(x), atol=1e-12, rtol=1e-12)
    # With alpha = 0 it is softmax attention, and only then.
    softmax = SoftmaxAttention(32, 4).double()
    softmax.load_state_dict(attn.state_dict(), strict=False)
    assert not torch.allclose(attn(x), softmax(x))
    with torch.no_grad():
        attn.neg_scalers.zero_()
    torch.testing.assert_close(attn(x), softmax(x))


@pytest.mark.parametrize("policy", ["random", "scaled_copy"])
def test_tied_q_imports_softmax_and_dna_checkpoints(policy):
    """A softmax checkpoint: V- by the dna_init policy, alpha its initial value, everything else
    loaded (with alpha = 0 the model is the softmax model); a DnA checkpoint: all but Q-, which
    is reported unused; the kind is read back from its own tensors."""
    from test_checkpoints import TOL, clip, ours
    from test_checkpoints import randomise as randomise_net

    from dna_video.checkpoints import Outcome, Reason, infer_geometry, load_pretrained

    source = randomise_net(ours("softmax"))
    model = ours("dna_tied_q")
    report = load_pretrained(model, source.state_dict(), dna_init=policy)
    initialised = {e.key: e.steps[0].reason for e in report.of(Outcome.INITIALISED)}
    assert set(initialised) == {f"blocks.{i}.{path}.{name}" for i in range(2) for path in ("attn", "temporal_attn")
                                for name in ("v_neg.weight", "v_neg.bias", "neg_scalers")}
    assert initialised["blocks.1.attn.v_neg.weight"] is (Reason.DNA_INIT_SCALED if policy == "scaled_copy"
                                                         else Reason.DNA_INIT)
    assert not report.unused
    v_pos = source.state_dict()["blocks.1.attn.qkv.weight"][64:]
    if policy == "scaled_copy":
        torch.testing.assert_close(model.blocks[1].attn.v_neg.weight, 1e-4 * v_pos)
    else:
        assert 0.015 < model.blocks[1].attn.v_neg.weight.std() < 0.025  # trunc-normal(0.02)
    with torch.no_grad():
        for module in model.attention_modules().values():
            module.neg_scalers.zero_()
    torch.testing.assert_close(model(clip()), source(clip()), **TOL)

    dna = randomise_net(ours("dna"))
    report = load_pretrained(ours("dna_tied_q"), dna.state_dict())
    assert not report.initialised and set(report.unused) == {
        f"blocks.{i}.{path}.q_neg.{n}" for i in range(2) for path in ("attn", "temporal_attn") for n in ("weight", "bias")}
    assert infer_geometry(ours("dna_tied_q").state_dict())["attention"] == "dna_tied_q"


def test_diff_parameter_count_matches_softmax_up_to_biases_lambdas_and_norm():
    dim, heads = 64, 4
    diff = DifferentialAttention(dim, heads)
    shapes = {k: tuple(v.shape) for k, v in diff.state_dict().items()}
    d = dim // heads
    assert shapes == {"qkv.weight": (3 * dim, dim), "proj.weight": (dim, dim), "proj.bias": (dim,),
                      "lambda_q1": (d,), "lambda_k1": (d,), "lambda_q2": (d,), "lambda_k2": (d,),
                      "sub_norm.weight": (2 * d,)}
    softmax = sum(p.numel() for p in SoftmaxAttention(dim, heads).parameters())
    assert sum(p.numel() for p in diff.parameters()) == softmax - 3 * dim + 4 * d + 2 * d
    with pytest.raises(ValueError, match="must be even"):
        DifferentialAttention(48, 3)


def test_diff_lambda_init_per_depth_in_the_timesformer():
    # 0.8 - 0.6 exp(-0.3 (l - 1)) for l = 1, 2, 4 (values worked out by hand).
    assert diff_lambda_init(1) == pytest.approx(0.2)
    assert diff_lambda_init(2) == pytest.approx(0.8 - 0.6 * 0.7408182207)
    assert diff_lambda_init(4) == pytest.approx(0.8 - 0.6 * 0.4065696597)
    net = timesformer("tiny", num_classes=3, img_size=16, num_frames=2, attention="diff")
    for i, block in enumerate(net.blocks):
        for attn in (block.attn, block.temporal_attn):
            assert isinstance(attn, DifferentialAttention)
            assert attn.layer_index == i + 1
            assert attn.lambda_init == pytest.approx(0.8 - 0.6 * math.exp(-0.3 * i))


def test_diff_equals_timm_diff_attention():
    """timm's DiffAttention (no q/k/v bias, H/2 heads, depth = 0-based block index) computes
    the same function from the same weights, which load by name."""
    from timm.layers.diff_attention import DiffAttention

    dim, heads, layer = 64, 4, 3
    ours = make("diff", dim, heads, layer_index=layer).eval()
    theirs = DiffAttention(dim, num_heads=heads // 2, qkv_bias=False, depth=layer - 1).double().eval()
    theirs.load_state_dict(ours.state_dict())
    assert theirs.lambda_init == pytest.approx(ours.lambda_init)
    x = torch.randn(2, 20, dim, dtype=torch.float64)
    # timm computes lambda in float32 (`.float()`) whatever the parameters' dtype.
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-5)


def test_cog_absolute_weights_sum_to_one_and_keep_the_score_sign():
    attn = make("cog", 32, 4)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    _, maps = attn.forward_with_maps(x)
    w = maps["attn"]
    torch.testing.assert_close(w.abs().sum(-1), torch.ones(2, 4, 9, dtype=torch.float64))
    q, k, _ = (x @ attn.qkv.weight.T + attn.qkv.bias).split(32, dim=-1)
    q, k = (t.unflatten(-1, (4, 8)).transpose(1, 2) for t in (q, k))
    assert torch.equal(torch.sign(w), torch.sign(q @ k.transpose(-1, -2)))
    assert (w < 0).any() and (w > 0).any()


@pytest.mark.parametrize("ends,expected", [(True, [True, False, False, True]), (False, [False] * 4)])
def test_cog_keeps_softmax_in_first_and_last_blocks(ends, expected):
    net = timesformer("tiny", num_classes=3, img_size=16, num_frames=2, attention="cog",
                      attention_kwargs={"cog_softmax_ends": ends})
    assert [b.attn.keeps_softmax for b in net.blocks] == expected
    assert [b.temporal_attn.keeps_softmax for b in net.blocks] == expected
    x = torch.randn(1, 40, 64, dtype=torch.float64)  # past explicit_max_len: the fused path
    first = randomise(net.blocks[0].attn.double(), seed=3)
    _, maps = first.forward_with_maps(x)
    assert bool((maps["attn"] >= 0).all()) == ends
    # A module that keeps softmax is softmax attention, on both paths.
    softmax = SoftmaxAttention(64, 2).double()
    softmax.load_state_dict(first.state_dict())
    assert torch.allclose(first(x), softmax(x), atol=1e-12) == ends
    assert torch.allclose(first.forward_with_maps(x)[0], softmax(x), atol=1e-12) == ends


def test_per_path_attention_builds_each_path_and_splits_kwargs():
    net = timesformer("tiny", num_classes=3, img_size=16, num_frames=2, temporal_attention="softmax",
                      spatial_attention="dna", attention_kwargs={"alpha_init": 0.25})
    for block in net.blocks:
        assert type(block.temporal_attn) is SoftmaxAttention
        assert type(block.attn).__name__ == "DenoisingAttention"
        assert torch.equal(block.attn.neg_scalers, torch.full((2,), 0.25))
    assert net.attention == "temporal=softmax,spatial=dna"
    # One value sets both; a per-path value overrides it.
    net = timesformer("tiny", num_classes=3, img_size=16, num_frames=2, attention="cog", temporal_attention="diff")
    assert all(isinstance(b.attn, CogAttention) and isinstance(b.temporal_attn, DifferentialAttention)
               for b in net.blocks)
    assert kwargs_by_kind(["dna", "cog"], {"alpha_init": 0.1, "cog_softmax_ends": False}) == {
        "dna": {"alpha_init": 0.1}, "cog": {"cog_softmax_ends": False}}
    with pytest.raises(ValueError, match=r"\['alpha_iint'\] not taken"):
        timesformer("tiny", num_classes=3, attention="dna", attention_kwargs={"alpha_iint": 0.1})
    with pytest.raises(ValueError, match="unknown attention 'dnna'"):
        timesformer("tiny", num_classes=3, temporal_attention="dnna")


@pytest.mark.parametrize("kind", ["dna_shared_v", "dna_tied_q", "diff", "cog"])
def test_variant_trains_in_the_timesformer(kind):
    torch.manual_seed(0)
    net = timesformer("tiny", num_classes=3, img_size=16, num_frames=2, attention=kind, drop_path_rate=0.0)
    video = torch.randn(2, 3, 2, 16, 16)
    loss = torch.nn.functional.cross_entropy(net(video), torch.tensor([0, 2]))
    loss.backward()
    grads = {n: p.grad for n, p in net.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    # The variant's own parameters learn (temporal_fc starts at zero, so look at the spatial path).
    own = {"dna_shared_v": "blocks.1.attn.q_neg.weight", "dna_tied_q": "blocks.1.attn.v_neg.weight",
           "diff": "blocks.1.attn.lambda_q1", "cog": "blocks.1.attn.qkv.weight"}[kind]
    assert grads[own].abs().sum() > 0


@pytest.mark.parametrize("explicit_max_len", [0, 10**6], ids=["fused_kernel", "explicit"])
@pytest.mark.parametrize("kind", ["dna", "dna_shared_v", "dna_tied_q", "diff", "cog"])
def test_bf16_autocast_stays_bf16(kind, explicit_max_len):
    """Under bf16 autocast every kind computes in bf16: a float32 parameter (alpha, lambda)
    mixed into a branch must not promote the output, and the memory, to float32."""
    module = build_attention(kind, dim=64, num_heads=4)
    module.explicit_max_len = explicit_max_len
    seen = []  # the output projection casts back to bf16 anyway: look at what reaches it
    module.proj.register_forward_pre_hook(lambda _, inputs: seen.append(inputs[0].dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert module(torch.randn(2, 10, 64)).dtype == torch.bfloat16
    assert seen == [torch.bfloat16]
