"""GPU checks (marked ``gpu``; without CUDA they skip, saying why). ``benchmarks/gpu_check.sh``
runs them on the device machine (``benchmarks/README.md``, "GPU check").

* Every registered attention kind (asked of the registry) on CUDA against the written-out
  formula of ``test_attention`` / ``test_attention_variants``, computed in float64 from the same
  weights: the output without gradients (the fused kernel at every length), the training path's
  output and every gradient (fused at the spatial length 197, explicit at the temporal length 8),
  in float32 and under bf16 autocast, with SDPA limited to each backend in turn (flash,
  memory-efficient, math, cuDNN); a backend that offers no kernel for the dtype is a skip.
* ``torch.compile(fullgraph=True)`` (inductor) of a tiny TimeSformer per kind on CUDA, on
  randomised weights (``temporal_fc`` starts at zero), equals eager: output and gradients.

Imports: torch, einops, timm and ``dna_video.models`` only (no Lightning, no video decoders),
so the device machine's own Python runs them from source. ``tests/test_gpu_check.py`` runs the
same checking code on the CPU in the regular suite.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from dna_video.models.attention import attention_kind, attention_kinds, build_attention
from dna_video.models.timesformer import timesformer
from test_attention import randomise, reference_dna, reference_mhsa
from test_attention_variants import REFERENCES as VARIANT_REFERENCES

NO_CUDA = "no CUDA GPU here: the gpu checks need one (run benchmarks/gpu_check.sh on a GPU machine)"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]

KINDS = attention_kinds()
DIM, HEADS = 64, 4
#: TimeSformer-B's spatial sequence (14 x 14 patches + cls: past ``explicit_max_len``, so the
#: training path is fused) and a temporal one (8 frames: the explicit path when training).
LENGTHS = (197, 8)
BACKENDS = {name: getattr(SDPBackend, name)
            for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION")
            if hasattr(SDPBackend, name)}
#: Largest relative error ||ours - formula|| / ||formula|| per tensor (output, each gradient).
#: float32: rounding of float32 arithmetic lands far below 1e-4 (the CPU's kernels: 1e-6, diff's
#: lambda gradients 2.4e-5); TF32 (about 3e-4) would not pass. bf16 autocast: operands rounded
#: to 8 significant bits (2^-9 = 2e-3 each) at every matmul and kernel of forward and backward;
#: the CPU's paths give at most 2.6% on these inputs (cog, whose sign(p) flips for scores near
#: 0), 3% leaves room for other kernels' accumulation order, while a wrong term (a missing
#: alpha, a sign) is off by tens of percent. A tensor whose written-out formula is itself less
#: accurate in that precision may be off by twice as much (:func:`check_formula`).
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def written_out(kind: str) -> Callable[[Tensor, nn.Module], Tensor]:
    """The kind's formula written out term by term (the references of the CPU tests); a kind
    registered elsewhere without one is checked against its own ``forward_with_maps``."""
    references = {"softmax": reference_mhsa, "dna": reference_dna, **VARIANT_REFERENCES}
    if kind in references:
        return references[kind]
    return lambda x, module: module.forward_with_maps(x)[0]


def modules_of(kind: str, seed: int) -> dict[str, nn.Module]:
    """The kind's module with random weights in a middle block of 4, and for a kind that
    takes the depth also in the first one (where e.g. cog keeps softmax: its fused path)."""
    blocks = (2, 1) if attention_kind(kind).takes_depth else (2,)
    return {f"block {i}": randomise(build_attention(kind, DIM, HEADS, layer_index=i, num_layers=4), seed=seed + i)
            for i in blocks}


def relative_error(ours: Tensor, expected: Tensor) -> float:
    ours, expected = ours.double(), expected.double()
    return ((ours - expected).norm() / expected.norm()).item()


def _train(module: nn.Module, x: Tensor, out_grad: Tensor, forward) -> dict[str, Tensor]:
    """The output and every gradient (input's and parameters') of one forward and backward."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    out = forward(module, x)
    if out.dtype not in (torch.float32, torch.float64):
        out = out.float()  # a bf16 output: backward from float32, as a float32 loss does
    out.backward(out_grad.to(out.dtype))
    return {"output": out.detach(), "grad x": x.grad,
            **{f"grad {name}": p.grad for name, p in module.named_parameters()}}


def formula_errors(kind: str, device: torch.device, dtype: torch.dtype, backend: SDPBackend,
                   seed: int = 0) -> dict[str, tuple[float, float]]:
    """Per tensor (each output, each gradient): the relative error of ``kind`` on ``device``
    (float32 weights; ``dtype`` bf16 means bf16 autocast, as ``precision=bf16-mixed`` trains)
    against the written-out formula in float64 from the same weights and inputs, SDPA limited
    to ``backend``; and beside it the error of the written-out formula itself run in the same
    precision on the same device (the floor that precision sets for that tensor). Raises
    RuntimeError ("No available kernel" / "No viable backend") when ``backend`` has none."""
    formula = written_out(kind)
    low = dtype != torch.float32
    generator = torch.Generator().manual_seed(seed)
    errors: dict[str, tuple[float, float]] = {}

    def in_precision(forward):
        def run(m: nn.Module, x: Tensor) -> Tensor:
            with torch.autocast(device.type, dtype=dtype, enabled=low):
                return forward(m, x)
        return run

    ours = in_precision(lambda m, x: m(x))
    for block, module in modules_of(kind, seed).items():
        module = module.to(device)
        reference = copy.deepcopy(module).double()
        for length in LENGTHS:
            # Inputs of std 0.5: attention scores of std about 1.5, as in a trained model
            # (std 1 with these weights gives std-6 scores, far peakier than real maps).
            x = (0.5 * torch.randn(2, length, DIM, generator=generator)).to(device)
            out_grad = torch.randn(2, length, DIM, generator=generator).to(device)
            expected = _train(reference, x.double(), out_grad.double(), lambda m, x: formula(x, m))
            floor = _train(module, x, out_grad, in_precision(lambda m, x: formula(x, m)))
            with sdpa_kernel([backend]):
                with torch.no_grad():
                    inference = ours(module, x)
                trained = _train(module, x, out_grad, ours)
            where = f"L={length}, {block}"
            errors[f"{where}: output without grad"] = (
                relative_error(inference, expected["output"]), relative_error(floor["output"], expected["output"]))
            for name, value in trained.items():
                if value is None or expected[name] is None or floor[name] is None:
                    raise AssertionError(f"{where}: {name} is missing on one side")
                errors[f"{where}: {name}"] = (relative_error(value, expected[name]),
                                              relative_error(floor[name], expected[name]))
    return errors


NO_KERNEL = ("No available kernel", "No viable backend")


def check_formula(kind: str, device: torch.device, dtype_name: str, backend_name: str) -> None:
    """Assert every relative error of :func:`formula_errors` within :data:`TOLERANCE`, or
    within twice the written-out formula's own error in that precision (a gradient that is a
    sum with cancellation, e.g. diff's lambda vectors in bf16, about 8% for both); skip when
    the backend offers no kernel for the dtype."""
    dtype = DTYPES[dtype_name]
    try:
        errors = formula_errors(kind, device, dtype, BACKENDS[backend_name])
    except RuntimeError as error:
        if any(text in str(error) for text in NO_KERNEL):
            pytest.skip(f"SDPA {backend_name} offers no kernel for {dtype_name} on {device}")
        raise
    worst = max(errors, key=lambda name: errors[name][0])
    print(f"[{kind} {dtype_name} {backend_name}: worst relative error {errors[worst][0]:.1e} "
          f"(written out in {dtype_name}: {errors[worst][1]:.1e}; {worst})]")
    bad = {name: f"{error:.2e} (written out: {floor:.2e})" for name, (error, floor) in errors.items()
           if not error <= max(TOLERANCE[dtype], 2 * floor)}
    assert not bad, f"over {TOLERANCE[dtype]:g} and twice the written-out formula's own error: {bad}"


@pytest.fixture
def exact_float32():
    """float32 matmuls in float32, not TF32 (torch's default; stated so a changed default or an
    earlier test cannot loosen the float32 check)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_paths_equal_the_written_out_formula(kind, dtype, backend, exact_float32):
    check_formula(kind, torch.device("cuda"), dtype, backend)


# -- torch.compile on CUDA ----------------------------------------------------------------------------
def tiny_timesformer(kind: str, seed: int = 0) -> nn.Module:
    """A 2-block tiny TimeSformer of ``kind`` in every block (the kind's ``all_blocks_kwargs``:
    cog would keep softmax in both blocks of 2) with 17 spatial tokens (the fused path in
    training) and 4 frames, every weight perturbed, ``temporal_fc`` and ``time_embed`` included."""
    torch.manual_seed(seed)
    net = timesformer("tiny", num_classes=5, img_size=32, num_frames=4, depth=2, attention=kind,
                      attention_kwargs=dict(attention_kind(kind).all_blocks_kwargs), drop_path_rate=0.0)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return net


def _video(device: torch.device) -> Tensor:
    return torch.randn(2, 3, 4, 32, 32, generator=torch.Generator().manual_seed(1)).to(device)


def _train_step(net: nn.Module, video: Tensor, out_grad: Tensor, call: Callable | None = None) -> dict[str, Tensor]:
    """Output and every parameter's gradient of ``call(video)`` (default: ``net(video)``)."""
    net.zero_grad(set_to_none=True)
    out = (net if call is None else call)(video)
    out.backward(out_grad.to(out.dtype))
    return {"output": out.detach(), **{f"grad {name}": p.grad for name, p in net.named_parameters()}}


def compiled_errors(kind: str, device: torch.device, backend: str = "inductor") -> dict[str, tuple[float, float]]:
    """Per tensor (output, each gradient) of a training step (forward and backward) through
    ``torch.compile(fullgraph=True)``: its relative error against the same step in float64,
    and beside it the eager float32 step's. One compiled graph per kind (a call without
    gradients would compile a second one)."""
    torch._dynamo.reset()
    eager = tiny_timesformer(kind).to(device)
    exact = copy.deepcopy(eager).double()
    compiled_net = copy.deepcopy(eager)
    compiled = torch.compile(compiled_net, fullgraph=True, backend=backend)
    video = _video(device)
    out_grad = torch.randn(2, 5, generator=torch.Generator().manual_seed(2)).to(device)
    expected = _train_step(exact, video.double(), out_grad)
    ours = _train_step(compiled_net, video, out_grad, call=compiled)  # parameters named as eager's
    plain = _train_step(eager, video, out_grad)
    return {name: (relative_error(ours[name], expected[name]), relative_error(plain[name], expected[name]))
            for name in expected}


def temporal_attention_matters(kind: str, device: torch.device) -> float:
    """Relative change of the tiny model's output when every ``temporal_fc`` is zeroed: the
    compile check would not see the temporal attention if this were 0."""
    net = tiny_timesformer(kind).to(device).eval()
    video = _video(device)
    with torch.no_grad():
        before = net(video)
        for block in net.blocks:
            block.temporal_fc.weight.zero_()
        return relative_error(net(video), before)


@pytest.mark.parametrize("kind", KINDS)
def test_compiled_fullgraph_equals_eager_on_cuda(kind, exact_float32):
    device = torch.device("cuda")
    assert temporal_attention_matters(kind, device) > 1e-3
    errors = compiled_errors(kind, device)
    worst = max(errors, key=lambda name: errors[name][0])
    print(f"[{kind} compiled: worst relative error {errors[worst][0]:.1e} (eager: {errors[worst][1]:.1e}; {worst})]")
    # float32 both ways against float64; inductor fuses and reorders sums, which moves
    # rounding only: within 1e-4, or twice eager's own error where a gradient is a sum with
    # cancellation (diff's lambda vectors: about 2e-5 in float32).
    bad = {name: f"{error:.2e} (eager: {plain:.2e})" for name, (error, plain) in errors.items()
           if not error <= max(1e-4, 2 * plain)}
    assert not bad, bad
