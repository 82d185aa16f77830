"""``dna-video export onnx --int8`` (dna_video.export.int8.quantize_onnx): ONNX Runtime's
dynamic int8 quantisation of an exported model, beside it, with the same metadata.

Checked against independent counts taken from the fp32 graph: every weight of a MatMul, Gemm or
Conv (an initialiser as its second input) is stored as int8, element for element, with one
int8 zero point and one float32 scale each (per tensor), and each such node became
``MatMulInteger`` / ``ConvInteger`` fed by ``DynamicQuantizeLinear``.

Tolerance of the logits: weights are rounded to 1 / 127 of each tensor's largest |value| and
activations, per call, to 1 / 255 of their range; the error adds up through the blocks. Measured
on the tiny randomised model below (4 batches of 3 clips): 0.018-0.026 x the largest |logit|
(the onnx benchmark's rows state it for its two models). The test allows 0.15 x: the logits of
other weights are off by about 1 x, and the fp32 file passed off as int8 is caught by equality.
Top-1 is compared where it is unambiguous: the tiny model trained on dark vs bright
clips (conftest's ``tiny_checkpoint``) on new videos of each class.
"""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import pytest

from dna_video.export.errors import ExportError
from dna_video.export.int8 import int8_path, quantize_onnx
from dna_video.export.metadata import runtime_metadata
from dna_video.export.program import export_onnx
from test_export import SETTINGS, TINY, build, clips

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

LOGIT_TOLERANCE = 0.15  # x the largest |fp32 logit|: see the module docstring
INTEGER_OPS = {"MatMul": "MatMulInteger", "Gemm": "MatMulInteger", "Conv": "ConvInteger"}


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """The tiny randomised DnA model (one block), exported once to fp32 ONNX and quantised:
    (net, metadata, fp32 path, int8 path)."""
    net = build("dna")
    metadata = runtime_metadata(net, SETTINGS, [f"action {i}" for i in range(TINY["num_classes"])], source="tiny")
    folder = tmp_path_factory.mktemp("int8")
    fp32 = export_onnx(net, folder / "model.onnx", metadata)
    return net, metadata, fp32, quantize_onnx(fp32)


def _weights(model) -> dict[str, np.ndarray]:
    return {tensor.name: onnx.numpy_helper.to_array(tensor) for tensor in model.graph.initializer}


def _const_weight_nodes(model) -> list:
    """Nodes of INTEGER_OPS' kinds whose second input is an initialiser (a stored weight)."""
    weights = _weights(model)
    return [n for n in model.graph.node if n.op_type in INTEGER_OPS and n.input[1] in weights]


def test_int8_file_is_beside_and_smaller_with_every_weight_int8(models):
    _, _, fp32_path, int8_file = models
    assert int8_file == fp32_path.with_name("model.int8.onnx") == int8_path(fp32_path)
    assert sorted(p.name for p in fp32_path.parent.iterdir()) == ["model.int8.onnx", "model.onnx"]
    fp32, int8 = onnx.load(str(fp32_path)), onnx.load(str(int8_file))
    fp32_weights = _weights(fp32)
    quantisable = [fp32_weights[n.input[1]] for n in _const_weight_nodes(fp32)]
    int8_tensors = [w for w in _weights(int8).values() if w.dtype == np.int8]
    # Element for element, plus one zero point per weight tensor (per-tensor quantisation).
    assert sum(w.size for w in int8_tensors) == sum(w.size for w in quantisable) + len(quantisable)
    assert len(int8_tensors) == 2 * len(quantisable)
    # The float32 weights left: all but those, plus one float32 scale per quantised weight.
    float_bytes = sum(w.nbytes for w in _weights(int8).values() if w.dtype == np.float32)
    fp32_bytes = sum(w.nbytes for w in fp32_weights.values() if w.dtype == np.float32)
    assert float_bytes == fp32_bytes - sum(w.nbytes for w in quantisable) + 4 * len(quantisable)
    assert int8_file.stat().st_size < 0.5 * fp32_path.stat().st_size


def test_int8_graph_multiplies_weights_in_integers(models):
    _, _, fp32_path, int8_file = models
    fp32, int8 = onnx.load(str(fp32_path)), onnx.load(str(int8_file))
    expected: dict[str, int] = {}
    for node in _const_weight_nodes(fp32):
        expected[INTEGER_OPS[node.op_type]] = expected.get(INTEGER_OPS[node.op_type], 0) + 1
    ops = [n.op_type for n in int8.graph.node]
    assert {op: ops.count(op) for op in expected} == expected and expected["MatMulInteger"] >= 8
    assert "Gemm" not in ops and "Conv" not in ops
    assert not _const_weight_nodes(int8), "a float MatMul / Conv with a stored weight is left"
    # Each integer product gets its activations from a DynamicQuantizeLinear (uint8, scale per call).
    made_by = {out: n.op_type for n in int8.graph.node for out in n.output}
    integer_nodes = [n for n in int8.graph.node if n.op_type in ("MatMulInteger", "ConvInteger")]
    assert all(made_by[n.input[0]] == "DynamicQuantizeLinear" for n in integer_nodes)
    # The attention's products of two activations (q k^T, attn v) stay float: unchanged in number.
    float_matmuls = [n for n in fp32.graph.node if n.op_type == "MatMul" and n not in _const_weight_nodes(fp32)]
    assert ops.count("MatMul") == len(float_matmuls)


def test_int8_carries_the_metadata_and_runs_in_the_runtime(models):
    from dna_video.prediction.onnx_backend import load_onnx_model

    net, metadata, fp32_path, int8_file = models
    properties = {p.key: json.loads(p.value) for p in onnx.load(str(int8_file)).metadata_props}
    quantization = properties.pop("quantization")
    assert properties == json.loads(json.dumps(metadata))
    assert quantization["weights"] == "int8" and quantization["from"] == "model.onnx"
    fp32, int8 = load_onnx_model(fp32_path, device="cpu"), load_onnx_model(int8_file, device="cpu")
    assert int8.class_names == fp32.class_names and int8.settings == fp32.settings
    assert int8.aggregate == fp32.aggregate and int8.patch_size == fp32.patch_size == TINY["patch_size"]
    views = clips(3, seed=4).numpy()
    reference = fp32.logits(views)
    logits = int8.logits(views)
    assert logits.shape == reference.shape == (3, TINY["num_classes"])
    np.testing.assert_allclose(logits, reference, rtol=0, atol=LOGIT_TOLERANCE * float(np.abs(reference).max()))
    assert not np.array_equal(logits, reference)  # it is another model, not the fp32 file again


def test_quantisation_errors_are_one_line(models, tmp_path):
    _, _, fp32_path, _ = models
    with pytest.raises(ValueError, match="the fp32 model itself"):
        quantize_onnx(fp32_path, fp32_path)
    foreign = tmp_path / "notes.onnx"
    foreign.write_text("not a model")
    with pytest.raises(ExportError) as error:
        quantize_onnx(foreign)
    assert "\n" not in str(error.value) and str(foreign) in str(error.value) and error.value.operation == "onnx.load"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.onnx"]


def test_missing_quantisation_tools_stop_before_the_export(monkeypatch, tmp_path, capsys):
    """Without onnxruntime.quantization, ``export onnx --int8`` says what to install in one line
    before it reads the checkpoint (a missing one is not reached) and writes nothing."""
    from dna_video.tools.export import main

    monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)
    out = tmp_path / "model.onnx"
    assert main(["onnx", str(tmp_path / "missing.ckpt"), str(out), "--int8"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: int8 quantisation needs") and "\n" not in err
    assert "onnxruntime.quantization" in err and f"{sys.executable} -m pip install -c constraints.txt -e '.[deploy]'" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_export_int8_command_and_predict_unchanged(tiny_checkpoint, new_videos, tmp_path, capsys):
    """``export onnx CKPT OUT --int8`` writes both files; ``predict OUT.int8.onnx`` runs it as it
    runs OUT.onnx, and on the dark vs bright model both name each new video's class."""
    from dna_video.tools.export import main as export
    from dna_video.tools.predict import main as predict

    ckpt, _ = tiny_checkpoint
    dark, bright = str(new_videos["dark"]), str(new_videos["bright"])
    out = tmp_path / "deploy" / "tiny.onnx"
    assert export(["onnx", str(ckpt), str(out), "--int8"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out.with_name('tiny.int8.onnx')}: int8 weights" in printed and "MiB in fp32" in printed
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny.int8.onnx", "tiny.onnx"]
    answers = {}
    for model in (out, out.with_name("tiny.int8.onnx")):
        table = tmp_path / f"{model.stem}.csv"
        assert predict([str(model), dark, bright, "--out", str(table)]) == 0
        with open(table, newline="") as f:
            answers[model.name] = {row["path"]: (row["pred_name"], float(row["prob"])) for row in csv.DictReader(f)}
    fp32, int8 = answers["tiny.onnx"], answers["tiny.int8.onnx"]
    assert {path: name for path, (name, _) in int8.items()} == {dark: "Dark", bright: "Bright"}
    assert {path: name for path, (name, _) in fp32.items()} == {dark: "Dark", bright: "Bright"}
