"""Which training path the attention modules take, and that each computes the formula:
the explicit path on CPU under bf16 autocast up to ``explicit_max_len_cpu_low_precision``
tokens, the fused kernel otherwise."""

import pytest
import torch

from dna_video.models.attention import ATTENTIONS, build_attention
from test_attention import _grads, _saved_shapes, randomise, reference_dna, reference_mhsa


def _keeps_maps(module, x, length):
    return any(shape[-2:] == (length, length) for shape in _saved_shapes(module, x))


@pytest.mark.parametrize("kind", ["dna", "softmax"])
def test_bf16_autocast_on_cpu_keeps_maps_up_to_the_threshold_only(kind):
    attn = build_attention(kind, 32, 2)
    limit = attn.explicit_max_len_cpu_low_precision
    assert attn.explicit_max_len < 40 <= limit
    short, long = torch.randn(2, 40, 32, requires_grad=True), torch.randn(1, limit + 1, 32, requires_grad=True)
    assert not _keeps_maps(attn, short, 40)  # float32: the fused kernel
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _keeps_maps(attn, short, 40)
        assert not _keeps_maps(attn, long, limit + 1)
        with torch.no_grad():  # nothing to keep for backward: the fused kernel
            attn(short)
    # A bf16 module on bf16 inputs, no autocast.
    assert _keeps_maps(attn.bfloat16(), short.detach().bfloat16().requires_grad_(), 40)


@pytest.mark.parametrize("threshold", [0, 256], ids=["fused_kernel", "explicit"])
@pytest.mark.parametrize("kind", ["dna", "softmax"])
def test_bf16_autocast_paths_match_the_written_out_formula(kind, threshold, monkeypatch):
    """Both paths under bf16 autocast: every gradient within bf16 precision of autocast-free
    float32 autograd through the term-by-term formula."""
    monkeypatch.setattr(ATTENTIONS[kind], "explicit_max_len_cpu_low_precision", threshold)
    attn = randomise(build_attention(kind, 64, 4), seed=9)
    reference = reference_dna if kind == "dna" else reference_mhsa
    x, g = torch.randn(2, 40, 64), torch.randn(2, 40, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = _grads(attn, x, g, lambda m, x: m(x).float())
    expected = _grads(attn, x, g, lambda m, x: reference(x, m))
    for name, grad in ours.items():
        assert grad.dtype == torch.float32, name
        assert (grad - expected[name]).abs().max() <= 0.05 * expected[name].abs().max(), name
