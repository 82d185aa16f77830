"""Export for deployment (dna_video.export, ``dna-video export``): every registered
attention kind exports to ONNX and to a torch.export archive with a dynamic batch, ONNX Runtime
gives PyTorch's logits, and the files carry what a runtime needs.

Weights are randomised: TimeSformer starts ``temporal_fc`` at zero, so freshly initialised
weights would hide the temporal attention from every comparison (checked by
``test_temporal_attention_changes_the_output``).
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from dna_video.export.errors import ExportError
from dna_video.export.metadata import load_pt2, read_metadata, runtime_metadata
from dna_video.export.program import export_onnx, export_program, export_pt2
from dna_video.models.attention import attention_kind, attention_kinds, kind_of
from dna_video.models.timesformer import TimeSformer
from every_kind import Layout, every_kind_timesformer, kind_slots

# One block: the export time is that of the graph (about linear in depth), the kinds' operations
# are all in one block. The parity tests export one model whose blocks hold every kind (one
# export's fixed cost, not one per kind); TimeSformer-B geometry with two kinds per block.
TINY = dict(num_classes=5, img_size=32, num_frames=4, patch_size=8, embed_dim=32, depth=1, num_heads=2)
# The same without depth: a model with every kind has a block per kind (tests/every_kind.py).
TINY_GEOMETRY = {key: value for key, value in TINY.items() if key != "depth"}
SETTINGS = dict(num_frames=4, sampling_rate=2, crop_size=32, mean=(0.45, 0.45, 0.45), std=(0.225, 0.225, 0.225))


def randomised(net: TimeSformer, seed: int = 0, scale: float = 0.1) -> TimeSformer:
    """``net`` with noise added to every parameter (temporal_fc, time_embed and each kind's
    negative-branch weights included), in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * scale)
    return net.eval()


def build(kind: str, seed: int = 0, **geometry) -> TimeSformer:
    """A TimeSformer of ``kind`` in both paths and every block (the kind's ``all_blocks_kwargs``),
    with randomised weights."""
    torch.manual_seed(seed)
    kwargs = {**TINY, **geometry}
    net = TimeSformer(**kwargs, attention=kind, attention_kwargs=dict(attention_kind(kind).all_blocks_kwargs),
                      drop_path_rate=0.0)
    return randomised(net, seed)


def tolerance(reference: np.ndarray) -> float:
    return 1e-4 * max(1.0, float(np.abs(reference).max()))


def clips(batch: int, seed: int, frames: int = 4, crop: int = 32) -> torch.Tensor:
    return torch.randn(batch, 3, frames, crop, crop, generator=torch.Generator().manual_seed(seed))


def pytorch_logits(net: TimeSformer, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return net(x).numpy()


def session(path):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def every_kind(layout: Layout, seed: int = 0, **geometry) -> TimeSformer:
    """The tiny model (or ``geometry``) with every registered kind in its blocks, two per block
    (``every_kind.every_kind_timesformer``), randomised: one export checks every kind."""
    torch.manual_seed(seed)
    return randomised(every_kind_timesformer(layout, **{**TINY_GEOMETRY, **geometry}), seed)


def attention_moves_the_logits(net: TimeSformer, x: torch.Tensor) -> dict[str, float]:
    """Per attention module of ``net``: how far perturbing its weights moves the logits, over
    the tolerance of the comparisons (every kind's module must be seen by them)."""
    before = pytorch_logits(net, x)
    moved = {}
    for name in net.attention_modules():
        perturbed = copy.deepcopy(net)
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in perturbed.get_submodule(name).parameters():
                p.add_(torch.randn(p.shape, generator=generator) * 0.5)
        moved[name] = float(np.abs(pytorch_logits(perturbed, x) - before).max()) / tolerance(before)
    return moved


@pytest.mark.parametrize("kind", attention_kinds())
def test_temporal_attention_changes_the_output(kind):
    """The parity below sees the temporal attention: perturbing it moves the logits far more
    than the tolerance."""
    net = build(kind)
    perturbed = copy.deepcopy(net)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for block in perturbed.blocks:
            for p in block.temporal_attn.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * 0.5)
    x = clips(2, seed=3)
    before, after = pytorch_logits(net, x), pytorch_logits(perturbed, x)
    assert np.abs(after - before).max() > 100 * tolerance(before)


@pytest.mark.slow
def test_every_kind_exports_to_onnx_and_pt2(tmp_path):
    """One tiny model whose blocks hold every registered kind (one export, not one per kind:
    the cost is the graph's; each kind in the path it is not in in the TimeSformer-B test
    below, so the two put every kind in both paths), its .onnx and .pt2 made from one
    torch.export trace:
    ONNX Runtime gives PyTorch's logits at batches other than the traced one, the files carry
    the runtime metadata, and the pt2 archive round-trips. On a failure, export ``build(kind)``
    of each kind alone to find the one at fault."""
    pytest.importorskip("onnxscript")
    onnx = pytest.importorskip("onnx")
    net = every_kind("swapped_pairs")
    kinds_in_blocks = [(kind_of(block.attn).name, kind_of(block.temporal_attn).name) for block in net.blocks]
    assert kinds_in_blocks == kind_slots("swapped_pairs")
    assert {kind for pair in kinds_in_blocks for kind in pair} == set(attention_kinds())
    # Every kind's module is seen by the comparisons: perturbing any one moves the logits.
    moved = attention_moves_the_logits(net, clips(2, seed=3))
    assert len(moved) == 2 * len(net.blocks) and min(moved.values()) > 100, moved

    metadata = runtime_metadata(net, SETTINGS, [f"action {i}" for i in range(TINY["num_classes"])], source="every kind")
    program = export_program(net, metadata)
    onnx_path = export_onnx(net, tmp_path / "model.onnx", metadata, program=program)
    pt2_path = export_pt2(net, tmp_path / "model.pt2", metadata, program=program)

    # ONNX Runtime matches PyTorch at any batch.
    runtime = session(onnx_path)
    for batch in (1, 3):  # exported with 2: both sides of it
        x = clips(batch, seed=batch)
        reference = pytorch_logits(net, x)
        (logits,) = runtime.run(None, {"video": x.numpy()})
        assert logits.shape == (batch, TINY["num_classes"])
        np.testing.assert_allclose(logits, reference, rtol=0, atol=tolerance(reference), err_msg=net.attention)

    # The ONNX file carries the runtime metadata.
    properties = runtime.get_modelmeta().custom_metadata_map
    assert {key: json.loads(value) for key, value in properties.items()} == json.loads(json.dumps(metadata))
    assert read_metadata(onnx_path) == json.loads(json.dumps(metadata))
    decoded = read_metadata(onnx_path)
    assert decoded["class_names"] == [f"action {i}" for i in range(TINY["num_classes"])]
    assert (decoded["num_frames"], decoded["sampling_rate"], decoded["crop_size"]) == (4, 2, 32)
    assert decoded["mean"] == [0.45] * 3 and decoded["std"] == [0.225] * 3
    (video,) = onnx.load(str(onnx_path), load_external_data=False).graph.input
    dims = video.type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 3, 4, 32, 32]
    assert [i.name for i in runtime.get_inputs()] == ["video"]
    assert [o.name for o in runtime.get_outputs()] == ["logits"]

    # The pt2 archive round-trips.
    program, loaded = load_pt2(pt2_path)
    assert loaded == json.loads(json.dumps(metadata))
    assert read_metadata(pt2_path) == loaded
    x = clips(3, seed=5)
    reference = pytorch_logits(net, x)
    with torch.no_grad():
        logits = program.module()(x).numpy()
    np.testing.assert_allclose(logits, reference, rtol=0, atol=tolerance(reference), err_msg=net.attention)


B_GEOMETRY = dict(num_classes=10, img_size=224, num_frames=8, patch_size=16, embed_dim=768, num_heads=12)


@pytest.mark.slow
def test_timesformer_b_onnx_parity_with_every_kind(tmp_path):
    """TimeSformer-B geometry (768 wide, 12 heads, 16-pixel patches, 8 x 224 x 224), its blocks
    holding every registered kind, two per block (ceil(kinds / 2) blocks), each in the path it
    is not in in the tiny model above."""
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    net = every_kind_timesformer("pairs", **{**TINY_GEOMETRY, **B_GEOMETRY})
    randomised(net, seed=1, scale=0.02)
    assert {kind_of(m).name for m in net.attention_modules().values()} == set(attention_kinds())
    settings = {**SETTINGS, "num_frames": 8, "crop_size": 224}
    path = export_onnx(net, tmp_path / "b.onnx", runtime_metadata(net, settings))
    x = clips(1, seed=0, frames=8, crop=224)
    reference = pytorch_logits(net, x)
    (logits,) = session(path).run(None, {"video": x.numpy()})
    np.testing.assert_allclose(logits, reference, rtol=0, atol=tolerance(reference), err_msg=net.attention)


def test_export_command_on_a_trained_checkpoint(tiny_checkpoint, tmp_path, capsys):
    """``dna-video export onnx|pt2`` on a checkpoint trained in the tests: the files hold its
    class names and evaluation settings, nothing else is left in the folder, and ONNX Runtime
    gives the checkpoint's logits."""
    pytest.importorskip("onnxscript")
    from dna_video.__main__ import main as dna_video
    from dna_video.prediction.torch_backend import load_model
    from dna_video.tools.export import main

    ckpt, settings = tiny_checkpoint
    out = tmp_path / "deploy" / "tiny.onnx"
    assert main(["onnx", str(ckpt), str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:  # through the one command's table of tools
        dna_video(["export", "pt2", str(ckpt), str(tmp_path / "deploy" / "tiny.pt2")])
    assert done.value.code == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny.onnx", "tiny.pt2"]

    loaded = load_model(ckpt)
    for path in (out, out.with_suffix(".pt2")):
        metadata = read_metadata(path)
        assert metadata["class_names"] == loaded.class_names == ["Dark", "Bright"]
        for key in ("num_frames", "sampling_rate", "target_fps", "crop_size", "num_clips", "num_crops"):
            assert metadata[key] == settings[key], key
        assert metadata["mean"] == list(settings["mean"]) and metadata["std"] == list(settings["std"])
        assert metadata["aggregate"] == loaded.aggregate and metadata["source"] == ckpt.name
    x = clips(3, seed=9, frames=settings["num_frames"], crop=settings["crop_size"])
    reference = pytorch_logits(loaded.net, x)
    (logits,) = session(out).run(None, {"video": x.numpy()})
    np.testing.assert_allclose(logits, reference, rtol=0, atol=tolerance(reference))


def _broken_forward(forward, how: str):
    def broken(self, x):
        out = forward(self, x)
        if how == "no ONNX function":
            return torch.special.zeta(out.abs() + 2, out.abs() + 2)
        return out * 2 if out.sum() > 0 else out  # a branch on data: torch.export refuses it
    return broken


def test_export_error_names_the_operation_and_the_kind(monkeypatch, tmp_path):
    """A model whose spatial attention is of one kind and temporal of another; the spatial
    kind's forward gains an operation ONNX has no function for: the error names both."""
    pytest.importorskip("onnxscript")
    temporal, spatial = attention_kinds()[:2]
    module = attention_kind(spatial).module
    monkeypatch.setattr(module, "forward", _broken_forward(module.forward, "no ONNX function"))
    torch.manual_seed(0)
    net = randomised(TimeSformer(**TINY, temporal_attention=temporal, spatial_attention=spatial))
    with pytest.raises(ExportError) as error:
        export_onnx(net, tmp_path / "model.onnx", runtime_metadata(net, SETTINGS))
    assert "zeta" in error.value.operation and error.value.kind == spatial
    message = str(error.value)
    assert "\n" not in message and error.value.operation in message and repr(spatial) in message
    assert not list(tmp_path.iterdir())


def test_export_command_error_is_one_line(tiny_checkpoint, monkeypatch, tmp_path, capsys):
    """A kind whose forward branches on data: ``export pt2`` prints one line naming the source
    line and the kind, exits 1, and writes nothing."""
    from dna_video.prediction.torch_backend import load_model
    from dna_video.tools.export import main

    ckpt, _ = tiny_checkpoint
    kind = load_model(ckpt).net.attention
    module = attention_kind(kind).module
    monkeypatch.setattr(module, "forward", _broken_forward(module.forward, "data-dependent"))
    assert main(["pt2", str(ckpt), str(tmp_path / "model.pt2")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert repr(kind) in err and "out.sum() > 0" in err
    assert not list(tmp_path.iterdir())


def test_runtime_metadata_states_the_settings():
    net = build(attention_kinds()[0])
    with pytest.raises(ValueError, match="crop_size"):
        runtime_metadata(net, {k: v for k, v in SETTINGS.items() if k != "crop_size"})
    with pytest.raises(ValueError, match="2 class names for a 5-class model"):
        runtime_metadata(net, SETTINGS, ["a", "b"])
    metadata = runtime_metadata(net, {**SETTINGS, "target_fps": None}, source="x.ckpt")
    assert metadata["class_names"] == [f"class_{i}" for i in range(5)] and metadata["target_fps"] is None
    assert json.loads(json.dumps(metadata)) == {**metadata, "mean": [0.45] * 3, "std": [0.225] * 3}
