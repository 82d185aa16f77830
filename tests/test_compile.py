"""torch.compile(fullgraph=True) of the TimeSformer with every registered attention kind, on the
CPU with the cheap ``aot_eager`` backend (dynamo's tracing and AOT autograd's joint graph, run
by eager kernels): one graph for forward and backward, the same output and gradients as eager,
parameter names unchanged, and no second compilation on a second call with the same shapes.

The weights are randomised, ``temporal_fc`` included: it starts at zero, so on fresh weights a
test could not see the temporal attention (checked: perturbing it changes the output).
Inductor's compiled steps are timed by ``python -m benchmarks --sections compile``."""

import copy

import pytest
import torch
from torch import Tensor, nn

from dna_video.models.attention import attention_kind, attention_kinds, kind_of
from dna_video.models.timesformer import PRESETS, timesformer
from every_kind import every_kind_timesformer, kind_slots

GEOMETRY = dict(num_classes=5, img_size=32, num_frames=4)


def randomised(kind: str, depth: int = 2) -> nn.Module:
    """A tiny TimeSformer, 17 spatial tokens (the fused attention path in training) and 4
    frames (the explicit path), every weight perturbed. ``kind`` in every block of ``depth``
    (cog would keep softmax in both blocks of 2 without its ``all_blocks_kwargs``), or ``every
    kind``: one block per registered kind, each kind in both paths (``kind_slots("cyclic")``):
    one compilation checks every kind (it costs about a second per block, plus a fixed part that
    was most of each kind's 5-15 s on 2 cores when each kind had its own)."""
    torch.manual_seed(0)
    if kind == "every kind":
        tiny = {key: value for key, value in PRESETS["tiny"].items() if key != "depth"}
        net = every_kind_timesformer("cyclic", **tiny, **GEOMETRY)
    else:
        net = timesformer("tiny", **GEOMETRY, depth=depth, attention=kind,
                          attention_kwargs=dict(attention_kind(kind).all_blocks_kwargs), drop_path_rate=0.0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return net


def relative_change(a: Tensor, b: Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def train_step(net: nn.Module, video: Tensor, out_grad: Tensor) -> dict[str, Tensor]:
    """Output and every parameter's gradient of one forward and backward, by parameter name."""
    net.zero_grad(set_to_none=True)
    out = net(video)
    out.backward(out_grad)
    return {"output": out.detach(), **{name: p.grad for name, p in net.named_parameters()}}


def forget_einops_parameter_backend() -> None:
    """einops keeps a backend per tensor type in a dict that dynamo guards: an einops call on a
    type it has not seen yet (a Parameter) inside the compiled forward changed that dict and
    made the second call compile again. Called before the first compiled call, so that such an
    einops call shows as a recompilation even after eager calls made the entry."""
    from einops import _backends

    getattr(_backends, "_type2backend", {}).pop(nn.Parameter, None)


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.slow
def test_compiled_fullgraph_matches_eager_and_compiles_once(fresh_dynamo):
    eager = randomised("every kind")
    assert [(kind_of(b.attn).name, kind_of(b.temporal_attn).name) for b in eager.blocks] == kind_slots("cyclic")
    assert {kind_of(m).name for m in eager.attention_modules().values()} == set(attention_kinds())
    video = torch.randn(2, 3, 4, 32, 32, generator=torch.Generator().manual_seed(2))
    out_grad = torch.randn(2, 5, generator=torch.Generator().manual_seed(3))

    # Every block's temporal attention (every kind's, in the explicit path) is part of what is
    # compared.
    with torch.no_grad():
        before = eager(video)
        for block in range(len(eager.blocks)):
            perturbed = copy.deepcopy(eager)
            for name, p in perturbed.named_parameters():
                if name.startswith(f"blocks.{block}.temporal_attn."):
                    p.add_(torch.randn_like(p) * 0.05)
            assert relative_change(perturbed(video), before) > 1e-3, eager.blocks[block].temporal_attn

    # In place, as ``--model.network.compile true`` does: parameter names and state-dict keys
    # unchanged, so checkpoints of compiled and eager runs are interchangeable.
    compiled = copy.deepcopy(eager)
    compiled.compile(backend="aot_eager", fullgraph=True)
    assert list(compiled.state_dict()) == list(eager.state_dict())

    expected = train_step(eager, video, out_grad)
    forget_einops_parameter_backend()
    ours = train_step(compiled, video, out_grad)
    assert ours.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(ours[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)

    # A second training step with the same shapes runs the graph compiled above.
    with torch._dynamo.config.patch(error_on_recompile=True):
        again = train_step(compiled, video, out_grad)
    torch.testing.assert_close(again["output"], ours["output"], rtol=0, atol=0)


@pytest.mark.slow
def test_compiled_with_grad_checkpointing_matches_eager(fresh_dynamo):
    """Long clips combine both options: the recomputed block traces into the same one graph
    (one block: what is checked does not depend on depth, tracing time does)."""
    eager = randomised("dna", depth=1)
    eager.grad_checkpointing = True
    video = torch.randn(2, 3, 4, 32, 32, generator=torch.Generator().manual_seed(2))
    out_grad = torch.randn(2, 5, generator=torch.Generator().manual_seed(3))
    compiled = copy.deepcopy(eager)
    compiled.compile(backend="aot_eager", fullgraph=True)
    expected, ours = train_step(eager, video, out_grad), train_step(compiled, video, out_grad)
    for name in expected:
        torch.testing.assert_close(ours[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)
