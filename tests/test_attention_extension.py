"""A NEW attention kind, defined here outside the package and registered through the public
API, works everywhere the built-in kinds do, with no edit of the package: fit + test through
the command line from a YAML config, resume from last, import of its checkpoint, `analyze
maps`, the denoising measures (negative-branch mass and switch-off), a timm ViT, and the
benchmark's variant rows."""

import csv
import os
import sys
from pathlib import Path

import pytest
import timm
import torch
import yaml
from test_cli import cli_args

from dna_video.models.attention import (
    DNA_EXTRAS,
    AttentionKind,
    DenoisingAttention,
    NegativeBranch,
    attention_kind,
    attention_kinds,
    kind_of,
    register_attention,
)


class TanhDnA(DenoisingAttention):
    """DnA whose balance is bounded: alpha_h = tanh(neg_scalers_h), in (-1, 1)."""

    def alpha(self) -> torch.Tensor:
        return torch.tanh(self.neg_scalers)


KIND = register_attention(
    AttentionKind("tanh_dna", TanhDnA, "DnA with a tanh-bounded alpha", extras=DNA_EXTRAS, negative=NegativeBranch()),
    replace=True,
)


def randomise(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return module


def test_the_kind_is_registered_and_computes_its_formula():
    assert "tanh_dna" in attention_kinds() and attention_kind("tanh_dna") is KIND
    module = randomise(TanhDnA(8, 2)).double()
    assert kind_of(module) is KIND
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    # Written out: DnA with alpha = tanh(neg_scalers), per head.
    q, k, v = module.qkv(x).split(8, dim=-1)
    qn, vn = module.q_neg(x), module.v_neg(x)
    heads = [slice(0, 4), slice(4, 8)]
    out = []
    for h, s in enumerate(heads):
        scores_pos = q[..., s] @ k[..., s].transpose(-2, -1) / 2.0
        scores_neg = qn[..., s] @ k[..., s].transpose(-2, -1) / 2.0
        alpha = torch.tanh(module.neg_scalers[h])
        out.append(torch.softmax(scores_pos, -1) @ v[..., s] + alpha * torch.softmax(-scores_neg, -1) @ vn[..., s])
    expected = module.proj(torch.cat(out, dim=-1))
    torch.testing.assert_close(module(x), expected)
    torch.testing.assert_close(module.forward_with_maps(x)[0], expected)


@pytest.fixture(scope="session")
def trained(synthetic_root, tmp_path_factory):
    """A tanh_dna TimeSformer fitted and tested through the command line from a YAML config."""
    from dna_video.training.cli import main

    logs = tmp_path_factory.mktemp("tanh_dna")
    config = logs / "tanh_dna.yaml"
    config.write_text(yaml.safe_dump({"model": {"network": {"attention": "tanh_dna"}}}))
    limits = ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", "--trainer.limit_test_batches=1"]
    cli = main(["fit", *cli_args(synthetic_root, logs, "--config", str(config), "--trainer.max_epochs=1", *limits)])
    return cli, logs / "smoke" / "version_0", limits


@pytest.mark.slow
def test_fit_and_test_from_a_yaml_config(trained):
    cli, run, _ = trained
    blocks = cli.model.net.blocks
    assert all(type(b.attn) is TanhDnA and type(b.temporal_attn) is TanhDnA for b in blocks)
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["network"]["attention"] == "tanh_dna"
    import json

    metrics = json.loads((run / "test_metrics.json").read_text())
    assert metrics["num_videos"] == 4 and 0.0 <= metrics["top1"] <= 1.0
    with open(run / "metrics.csv") as f:
        columns = set(next(csv.reader(f)))
    assert "alpha/blocks.0.attn" in columns  # the kind's negative weight, logged per epoch


@pytest.mark.slow
def test_resume_from_last(trained, synthetic_root):
    from dna_video.training.cli import main

    _, run, limits = trained
    logs = run.parents[1]
    cli = main(["fit", *cli_args(synthetic_root, logs, "--config", str(logs / "tanh_dna.yaml"), "--trainer.max_epochs=2",
                                 *limits, "--test_after_fit=false", "--ckpt_path=last")])
    assert cli.trainer.current_epoch == 2
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1
    assert type(cli.model.net.blocks[0].attn) is TanhDnA


def test_its_checkpoint_imports_back(trained):
    from dna_video.checkpoints import load_pretrained, timesformer_from_checkpoint

    cli, run, _ = trained
    last = run / "checkpoints" / "last.ckpt"
    net, report = timesformer_from_checkpoint(last)
    assert type(net.blocks[0].attn) is TanhDnA and not report.initialised and not report.unused
    state = torch.load(last, weights_only=True)["state_dict"]
    for key, value in net.state_dict().items():
        torch.testing.assert_close(value, state[f"net.{key}"])
    # A softmax checkpoint into the new kind: its extras start as the kind declares (DNA_EXTRAS).
    from dna_video.models.timesformer import TimeSformer

    geometry = dict(num_classes=5, num_frames=4, img_size=64, patch_size=8, embed_dim=32, depth=2, num_heads=2)
    model = TimeSformer(**geometry, attention="tanh_dna")
    report = load_pretrained(model, TimeSformer(**geometry, attention="softmax").state_dict(), dna_init="scaled_copy")
    assert report.initialised["blocks.0.attn.q_neg.weight"] == "dna_init=scaled_copy (eps 0.0001)"
    assert report.initialised["blocks.1.temporal_attn.neg_scalers"] == "alpha_init (the model's initial alpha)"


@pytest.mark.slow
def test_analyze_maps(trained, synthetic_root, tmp_path):
    from dna_video.tools.analyze import main

    _, run, _ = trained
    video = sorted(Path(synthetic_root).rglob("*.mp4"))[0]
    assert main(["maps", str(run / "checkpoints" / "last.ckpt"), str(video), "--out", str(tmp_path)]) == 0
    saved = torch.load(tmp_path / f"{video.stem}_layer1_maps.pt")
    assert set(saved["spatial"]) == {"positive", "negative"}
    torch.testing.assert_close(saved["temporal"]["negative"].sum(-1), torch.ones(4))


def test_denoising_measures(trained):
    from dna_video.analysis.denoising import evaluate_masked, has_negative_branch, negative_branch_off

    net = randomise(trained[0].model.net).eval()
    assert has_negative_branch(net)
    video = torch.randn(2, 1, 3, 4, 64, 64)
    masks = torch.zeros(2, 1, 2, 4, 64, 64, dtype=torch.uint8)
    masks[:, :, 0, :, :8, :8] = 1  # actor: patch (0, 0)
    masks[:, :, 1, :, 56:, 56:] = 1  # distractor: the last patch
    batch = {"video": video, "masks": masks, "label": torch.tensor([0, 1])}
    result = evaluate_masked(net, [batch])
    assert set(result["mass"]) == {"positive", "negative"} and result["mass"]["negative"].shape == (2, 3)
    torch.testing.assert_close(result["mass"]["negative"].sum(-1), torch.ones(2, dtype=torch.float64))
    before = net(video[:, 0])
    with negative_branch_off(net) as switched:
        off = net(video[:, 0])
        assert switched == 4  # 2 blocks x (spatial, temporal)
        assert all(float(m.alpha().abs().sum()) == 0 for m in net.modules() if isinstance(m, TanhDnA))
    # Independent: the same network with alpha = tanh(0) = 0 set through its parameters.
    expected = randomise(trained[0].model.net.__class__(num_classes=5, num_frames=4, img_size=64, patch_size=8,
                                                        embed_dim=32, depth=2, num_heads=2, attention="tanh_dna"))
    expected.load_state_dict(net.state_dict())
    with torch.no_grad():
        for module in expected.modules():
            if isinstance(module, TanhDnA):
                module.neg_scalers.zero_()
    torch.testing.assert_close(off, expected.eval()(video[:, 0]))
    assert not torch.allclose(off, before)
    torch.testing.assert_close(net(video[:, 0]), before)


def test_a_timm_vit_with_it():
    from dna_video.models.vit import vision_transformer

    model = timm.create_model("vit_tiny_patch16_224_tanh_dna", num_classes=3, img_size=32, depth=2)
    assert all(type(b.attn) is TanhDnA for b in model.blocks)
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 3)
    custom = vision_transformer("custom", attention="tanh_dna", img_size=16, patch_size=8, embed_dim=16, depth=1,
                                num_heads=2, num_classes=2)
    assert type(custom.blocks[0].attn) is TanhDnA


def test_the_benchmark_variant_rows():
    from benchmarks.model import Geometry
    from benchmarks.variants import kinds, variant_rows

    assert "tanh_dna" in kinds()
    tiny = Geometry(32, 1, 2, 8, 32, 2, 1)
    rows = variant_rows(("softmax", "tanh_dna"), tiny, tiny, rounds=1)
    assert {r.ours for r in rows} == {"tanh_dna"} and {r.baseline for r in rows} == {"softmax"} and len(rows) == 3
    params = next(r for r in rows if r.metric == "M params")
    # Q-, V- (2 x (D^2 + D)) and alpha (H) per attention module, 2 modules per block.
    assert (params.ours_value - params.baseline_value) * 1e6 == pytest.approx(2 * (2 * (32 * 32 + 32) + 2))
    assert all(r.ours_value > 0 and r.baseline_value > 0 for r in rows)


# -- a kind from a module outside the package, loaded into the command by --import ----------------
OUTSIDE_KIND = '''
"""Written by a user, outside dna_video: softmax attention with a learned gate per head, and its
cross-attention for the probes."""
import pathlib

import torch
from torch import nn

# One line per time this module runs (tests/test_attention_extension.py counts them).
with open(pathlib.Path(__file__).with_suffix(".imports"), "a") as imports:
    imports.write("imported\\n")

from dna_video.models.attention import (
    AttentionKind, CheckpointExtra, SoftmaxAttention, SoftmaxCrossAttention, register_attention,
)


class GatedSoftmax(SoftmaxAttention):
    def __init__(self, dim, num_heads, qkv_bias=True, attn_drop=0.0, proj_drop=0.0, gate_init: float = 1.0):
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop)
        self.gate = nn.Parameter(torch.full((num_heads,), float(gate_init)))

    def _output(self, out):
        return super()._output(out * self.gate[:, None, None])


class GatedSoftmaxCross(SoftmaxCrossAttention):
    def __init__(self, dim, num_heads, qkv_bias=True, attn_drop=0.0, proj_drop=0.0, gate_init: float = 1.0):
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop)
        self.gate = nn.Parameter(torch.full((num_heads,), float(gate_init)))

    def _output(self, out):
        return super()._output(out * self.gate[:, None, None])


register_attention(AttentionKind("NAME", GatedSoftmax, "softmax with a gate per head",
                                 extras={"gate": CheckpointExtra("gate")}, cross=GatedSoftmaxCross))
'''


@pytest.fixture
def outside_kind(tmp_path, monkeypatch):
    """A module defining and registering a new kind, written to a folder on sys.path (not
    imported yet); the kind and the module are gone again after the test."""
    import sys

    from dna_video.models.attention import registry

    name = f"gated_{tmp_path.name.replace('-', '_')}"[:40]
    module = f"outside_{name}"
    (tmp_path / f"{module}.py").write_text(OUTSIDE_KIND.replace("NAME", name))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module, name
    registry._KINDS.pop(name, None)
    registry._NAMES.pop(name, None)
    sys.modules.pop(module, None)


def _times_imported(outside_kind, folder) -> int:
    """How many times the outside module has run (its own count, in a file beside it)."""
    counter = folder / f"{outside_kind[0]}.imports"
    return len(counter.read_text().splitlines()) if counter.exists() else 0


@pytest.mark.slow
def test_dna_video_fit_with_a_kind_from_an_outside_module(outside_kind, synthetic_root, tmp_path, capsys):
    """`dna-video fit --import MODULE --model.network.attention KIND`: the module is imported
    before the options are read, the network is built of the kind (its own parameter in the
    checkpoint, its option from attention_kwargs), with no edit of the package."""
    from dna_video.__main__ import main as dna_video

    module, name = outside_kind
    assert name not in attention_kinds()
    logs = tmp_path / "logs"
    run = [*cli_args(synthetic_root, logs, f"--model.network.attention={name}",
                     "--model.network.attention_kwargs={gate_init: 0.5}", "--trainer.max_epochs=1",
                     "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1", "--test_after_fit=false")]
    with pytest.raises(SystemExit):  # without the module the kind is unknown, and said so
        dna_video(["fit", *run])
    assert f"unknown attention '{name}'" in capsys.readouterr().err
    assert _times_imported(outside_kind, tmp_path) == 0
    dna_video(["fit", "--import", module, *run])
    assert attention_kind(name).module.__module__ == module
    assert _times_imported(outside_kind, tmp_path) == 1  # (review finding 16) once for the whole command
    (last,) = (logs / "smoke").glob("version_*/checkpoints/last.ckpt")  # the refused fit left no run
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["hyper_parameters"]["network"]["attention"] == name
    gates = {k: v for k, v in checkpoint["state_dict"].items() if k.endswith(".gate")}
    assert len(gates) == 4 and all(v.shape == (2,) for v in gates.values())  # 2 blocks x 2 paths, 2 heads
    # Trained from 0.5: the gates moved, but started at the option's value (not the class default 1).
    assert all(float((v - 0.5).abs().max()) < 0.1 for v in gates.values())


def test_an_import_that_fails_is_one_line(capsys):
    from dna_video.__main__ import main as dna_video

    with pytest.raises(SystemExit) as stop:
        dna_video(["--import", "no_such_module_of_yours", "configs"])  # (`configs` would only list them)
    assert stop.value.code == "error: --import no_such_module_of_yours: ModuleNotFoundError: No module named " \
                              "'no_such_module_of_yours' (set DNA_VIDEO_TRACEBACK=1 for the traceback)"


def test_a_command_with_import_runs_the_module_once(outside_kind, tmp_path, synthetic_root):
    """(review finding 16) ``--import MODULE`` given twice, as a name and as its file, and a
    command that builds the task with the kind: the module runs once (its own count)."""
    from dna_video.training.cli import main

    module, name = outside_kind
    path = tmp_path / f"{module}.py"
    cli = main(["--import", module, f"--import={path}", "--config", "configs/quickstart.yaml",
                f"--data.init_args.root={synthetic_root}", f"--model.network.attention={name}",
                "--model.network.depth=1", "--trainer.logger=false"], run=False)
    assert type(cli.model.net.blocks[0].attn).__module__ == module
    assert _times_imported(outside_kind, tmp_path) == 1


def test_a_py_file_given_to_import_and_the_probe_asks_the_registry(outside_kind, tmp_path):
    """``--import path/to/module.py`` imports the file; its kind's cross-attention serves the
    probe (built from the registry, its extras set by its own class) with no edit of the probe."""
    from dna_video.common.plugins import import_requested
    from dna_video.models.probe import ProbeClassifier
    from dna_video.models.timesformer import timesformer

    module, name = outside_kind
    assert import_requested(["fit", f"--import={tmp_path / (module + '.py')}", "--x"]) == ["fit", "--x"]
    assert import_requested(["--import", module]) == []  # the same module again: not run twice
    assert _times_imported(outside_kind, tmp_path) == 1  # (review finding 16) counted by the module itself
    backbone = timesformer("tiny", num_classes=0, img_size=16, num_frames=2, depth=2, embed_dim=16, num_heads=2)
    probe = ProbeClassifier(backbone, 3, num_probes=2, cross_attention=name, alpha_init=0.25)
    cross = attention_kind(name).cross
    assert all(type(m.attn) is cross for m in probe.interactions)
    # Started from the backbone's blocks: Q and K, V rows of their qkv (CrossAttention.start_from).
    block = backbone.blocks[0].attn
    torch.testing.assert_close(probe.interactions[0].attn.q.weight, block.qkv.weight[:16])
    assert probe(torch.randn(1, 3, 2, 16, 16)).shape == (1, 3)
    with pytest.raises(ValueError, match="unknown cross-attention 'tanh_dna'; choose one of"):
        ProbeClassifier(backbone, 3, cross_attention="tanh_dna")  # registered, but with no cross class


@pytest.mark.parametrize("stem", ["yaml", "json"])
def test_a_py_file_named_like_another_module_does_not_replace_it(stem, tmp_path, monkeypatch, caplog):
    """(review finding 9) ``--import yaml.py`` (an installed module's name) or ``json.py`` (the
    standard library's): the file runs under a private name, said in one line; the real module
    stays what every later ``import`` gets."""
    import importlib

    from dna_video.common.plugins import import_requested

    real = importlib.import_module(stem)
    monkeypatch.setitem(sys.modules, stem, real)  # restored whatever happens
    path = tmp_path / f"{stem}.py"
    path.write_text("RAN = True\n")
    assert import_requested(["--import", str(path), "configs"]) == ["configs"]
    assert sys.modules[stem] is real and importlib.import_module(stem) is real
    mine = sys.modules.pop(f"dna_video_import_{stem}")
    assert mine.RAN and Path(mine.__file__) == path
    assert f"--import {path}: imported as dna_video_import_{stem}" in caplog.text


def test_import_finds_a_module_in_the_current_folder_in_a_real_process(tmp_path):
    """(review of issue 36) The installed command's ``sys.path`` holds no current folder:
    ``--import MODULE`` looks there too, after the installed packages (docs/variants.md)."""
    import subprocess

    (tmp_path / "my_kinds_here.py").write_text("print('my_kinds_here ran')\n")
    done = subprocess.run([sys.executable, "-m", "dna_video", "--import", "my_kinds_here", "configs"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONSAFEPATH": "1"})  # -m would put the folder first
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "my_kinds_here ran"
