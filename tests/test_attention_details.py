"""Attention constructor arguments, map names and dropout in each branch of DnA's fused path.
Found by mutation testing (CONTRIBUTING.md): each test here failed for a planted change that
the formula tests in test_attention.py (dropout 0, default arguments) let through."""

import pytest
import torch

from dna_video.models.attention import DenoisingAttention, SoftmaxAttention, build_attention
from dna_video.models.attention import diff_lambda_init


@pytest.mark.parametrize("cls", [SoftmaxAttention, DenoisingAttention])
def test_bias_and_dropout_rates_reach_their_layers(cls):
    module = cls(16, 2, qkv_bias=False, attn_drop=0.3, proj_drop=0.1)
    assert module.qkv.bias is None and module.attn_drop == 0.3 and module.proj_drop.p == 0.1
    for extra in ("q_neg", "v_neg"):
        if hasattr(module, extra):
            assert getattr(module, extra).bias is None and getattr(cls(16, 2), extra).bias is not None
    default = cls(16, 2)
    assert default.qkv.bias is not None and default.attn_drop == 0.0 and default.proj_drop.p == 0.0


def test_dna_alpha_starts_at_the_references_half():
    assert torch.equal(DenoisingAttention(16, 4).neg_scalers.detach(), torch.full((4,), 0.5))


def test_softmax_map_is_returned_as_attn_and_is_the_written_out_softmax():
    torch.manual_seed(0)
    module = SoftmaxAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    _, maps = module.forward_with_maps(x)
    q, k, _ = module.qkv(x).reshape(2, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)
    expected = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
    assert list(maps) == ["attn"]
    torch.testing.assert_close(maps["attn"], expected)


def _only_one_branch(branch):
    """DnA with attention dropout 0.5 whose output comes from ``branch`` alone: alpha 0 for
    the positive branch, V+ zero for the negative one."""
    torch.manual_seed(0)
    module = DenoisingAttention(16, 2, attn_drop=0.5)
    with torch.no_grad():
        if branch == "positive":
            module.neg_scalers.zero_()
        else:
            module.qkv.weight[32:].zero_()
            module.qkv.bias[32:].zero_()
            module.neg_scalers.fill_(1.0)
    return module


@pytest.mark.parametrize("branch", ["positive", "negative"])
def test_attention_dropout_acts_on_each_branch_of_the_fused_path(branch):
    """Without gradients the fused kernel runs; training mode must drop attention weights in
    the branch that makes the output, and evaluation mode must not."""
    module = _only_one_branch(branch)
    x = torch.randn(2, 40, 16)  # longer than explicit_max_len, no grad: the fused path
    with torch.no_grad():
        evaluated = module.eval()(x)
        torch.testing.assert_close(module(x), evaluated)  # no dropout in eval
        torch.testing.assert_close(module.forward_with_maps(x)[0], evaluated)
        trained = module.train()(x)
    assert (trained - evaluated).abs().max() > 1e-2


@pytest.mark.parametrize("kind", ["softmax", "dna"])
def test_build_attention_passes_both_dropout_rates(kind):
    module = build_attention(kind, 16, 2, attn_drop=0.3, proj_drop=0.1)
    assert module.attn_drop == 0.3 and module.proj_drop.p == 0.1


def test_build_attention_depth_defaults_first_block_of_unknown_depth():
    """Without layer_index / num_layers: block 1 (diff's lambda_init 0.8 - 0.6 = 0.2) of an
    unknown depth (cog everywhere, no softmax ends)."""
    assert build_attention("diff", 16, 2).lambda_init == pytest.approx(0.2) == diff_lambda_init(1)
    assert build_attention("cog", 16, 2).keeps_softmax is False
    assert build_attention("cog", 16, 2, layer_index=1, num_layers=4).keeps_softmax is True


@pytest.mark.parametrize("length, dtype, explicit", [
    (16, torch.float32, True), (17, torch.float32, False),  # explicit_max_len = 16
    (256, torch.bfloat16, True), (257, torch.bfloat16, False),  # on CPU in bf16: up to 256
])
def test_explicit_path_lengths(length, dtype, explicit):
    """The documented switch between explicit matmuls and the fused kernel (width 32, wider
    than the thresholds' tokens would be, so that the token axis is the one measured)."""
    module = SoftmaxAttention(32, 2)
    x = torch.zeros(1, length, 32, dtype=dtype, requires_grad=True)
    assert module._explicit(x) is explicit
    assert module._explicit(x.detach()) is False  # no gradient needed: always the fused kernel


def test_softmax_attention_dropout_acts_on_the_fused_path():
    torch.manual_seed(0)
    module = SoftmaxAttention(16, 2, attn_drop=0.5)
    x = torch.randn(2, 40, 16)  # longer than explicit_max_len, no grad: the fused path
    with torch.no_grad():
        evaluated = module.eval()(x)
        torch.testing.assert_close(module.forward_with_maps(x)[0], evaluated)
        trained = module.train()(x)
    assert (trained - evaluated).abs().max() > 1e-2
