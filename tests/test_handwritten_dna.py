"""The hand-written-backward DnA kept in benchmarks/ computes what the library's plain
autograd path computes: outputs and every gradient, so the benchmark compares equals."""

import pytest
import torch

from benchmarks.handwritten_dna import HandWrittenDnA
from dna_video.models.attention import DenoisingAttention


@pytest.mark.parametrize("length", [6, 40], ids=["explicit", "fused_kernel"])
@pytest.mark.parametrize("qkv_bias", [True, False])
def test_handwritten_equals_plain_autograd_float64(length, qkv_bias):
    torch.manual_seed(0)
    plain = DenoisingAttention(24, 3, qkv_bias=qkv_bias).double()
    with torch.no_grad():
        plain.neg_scalers.copy_(torch.tensor([0.7, -0.4, 1.3]))
    handwritten = HandWrittenDnA(24, 3, qkv_bias=qkv_bias).double()
    handwritten.load_state_dict(plain.state_dict())
    x = torch.randn(2, length, 24, dtype=torch.float64)
    g = torch.randn(2, length, 24, dtype=torch.float64)
    grads = []
    for module in (plain, handwritten):
        xi = x.clone().requires_grad_()
        module(xi).backward(g)
        grads.append({"x": xi.grad, **{n: p.grad for n, p in module.named_parameters()}})
    torch.testing.assert_close(handwritten(x), plain(x), atol=1e-12, rtol=1e-12)
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-10, rtol=1e-10, msg=name)
