"""The MLP that recomputes its GELU in backward: same values and gradients as timm's Mlp,
less memory kept for backward."""

import pytest
import timm.layers
import torch

from dna_video.models.mlp import Mlp


def _pair(seed=0):
    torch.manual_seed(seed)
    reference = timm.layers.Mlp(32, 128)
    ours = Mlp(32, 128)
    missing, unexpected = ours.load_state_dict(reference.state_dict())  # same parameter names
    assert not missing and not unexpected
    return ours, reference


def _run(module, x, g):
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    out = module(x)
    out.backward(g)
    return out.detach(), {"x": x.grad, **{n: p.grad for n, p in module.named_parameters()}}


def test_values_and_gradients_equal_timm_float64():
    ours, reference = _pair()
    ours.double(), reference.double()
    x, g = torch.randn(3, 7, 32, dtype=torch.float64), torch.randn(3, 7, 32, dtype=torch.float64)
    out, grads = _run(ours, x, g)
    ref_out, ref_grads = _run(reference, x, g)
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=1e-12)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], atol=1e-12, rtol=1e-12, msg=name)


def test_frozen_fc2_gets_no_gradient_and_the_rest_is_unchanged():
    ours, reference = _pair()
    ours.double(), reference.double()
    for module in (ours, reference):
        module.fc2.requires_grad_(False)
    x, g = torch.randn(3, 7, 32, dtype=torch.float64), torch.randn(3, 7, 32, dtype=torch.float64)
    _, grads = _run(ours, x, g)
    _, ref_grads = _run(reference, x, g)
    assert grads["fc2.weight"] is None and grads["fc2.bias"] is None
    for name in ("x", "fc1.weight", "fc1.bias"):
        torch.testing.assert_close(grads[name], ref_grads[name], atol=1e-12, rtol=1e-12, msg=name)


def test_bf16_autocast_equals_timm_under_autocast():
    ours, reference = _pair(1)
    x, g = torch.randn(4, 9, 32), torch.randn(4, 9, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = _run(ours, x, g.bfloat16())
        ref_out, ref_grads = _run(reference, x, g.bfloat16())
    assert out.dtype == ref_out.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref_out)
    for name in ref_grads:
        assert grads[name].dtype == ref_grads[name].dtype, name
        torch.testing.assert_close(grads[name], ref_grads[name], msg=name)


def _saved_bytes(module, x):
    """Bytes of the non-parameter tensors autograd keeps for backward."""
    params = {p.data_ptr() for p in module.parameters()}
    total = 0

    def pack(t):
        nonlocal total
        if t.data_ptr() not in params:
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return total


def test_gelu_output_is_not_kept_for_backward():
    ours, reference = _pair()
    x = torch.randn(2, 50, 32, requires_grad=True)
    hidden = 2 * 50 * 128 * 4  # one (tokens x 4D) float32 tensor
    assert _saved_bytes(reference, x) - _saved_bytes(ours, x) == hidden


@pytest.mark.parametrize("drop", [0.0, 0.3])
def test_inference_and_dropout_use_the_plain_path(drop):
    ours, _ = _pair()
    ours.drop = drop
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        expected = ours.fc2(torch.nn.functional.gelu(ours.fc1(x)))
        torch.testing.assert_close(ours.eval()(x), expected)
    ours.train()
    torch.manual_seed(0)
    out = ours(x)
    if drop:  # dropout active in training: some outputs zeroed
        assert (out == 0).any()
    else:
        torch.testing.assert_close(out, expected)
