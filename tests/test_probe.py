"""Probes over a frozen TimeSformer: the network against hooks and a hand count, the backbone
untouched by a probe fit, the backbone imported from every checkpoint kind, and a probe fit +
test through its command line on generated videos."""

import csv

import lightning as L
import pytest
import torch
from test_checkpoints import GEOMETRY, random_dna_vit_state, randomise, save, tiny_hf, tiny_vit
from torch.utils.data import DataLoader

from dna_video.checkpoints import CheckpointError
from dna_video.data.synthetic import SYNTHETIC_CLASSES
from dna_video.tasks.video import VideoClassifier
from dna_video.models.probe import ProbeClassifier, resolve_layers
from dna_video.training.cli import main
from dna_video.checkpoints import PretrainedWeights
from dna_video.models.timesformer import TimeSformer, TimeSformerSpec
from dna_video.tasks.probe import ProbeClassifierModule, ProbeOptions

BACKBONE_NET = dict(arch="tiny", **GEOMETRY, drop_path_rate=0.0)  # width 32, depth 2, 2 heads
BACKBONE = dict(network=TimeSformerSpec(**BACKBONE_NET))


def backbone(attention="dna", seed=0, **kwargs):
    args = dict(GEOMETRY, num_classes=5, num_frames=4, img_size=32, drop_path_rate=0.0)
    return randomise(TimeSformer(attention=attention, **{**args, **kwargs}), seed=seed)


def video(b=2, seed=1):
    return torch.randn(b, 3, 4, 32, 32, generator=torch.Generator().manual_seed(seed))


def test_layers_are_resolved_and_checked():
    assert resolve_layers(None, 4) == [0, 1, 2, 3]
    assert resolve_layers([-1, 1], 4) == [1, 3]
    with pytest.raises(ValueError, match=r"probe_layers \[4\] out of range for a backbone of depth 4"):
        resolve_layers([0, 4], 4)
    with pytest.raises(ValueError, match="names a block twice"):
        resolve_layers([3, -1], 4)


def test_intermediates_are_the_block_outputs_and_each_module_starts_from_its_block():
    net = backbone(depth=3)
    captured = {}
    hooks = [b.register_forward_hook(lambda m, a, out, i=i: captured.__setitem__(i, out)) for i, b in enumerate(net.blocks)]
    clip = video()
    with torch.no_grad():
        net(clip)
    for h in hooks:
        h.remove()
    probe = ProbeClassifier(net, num_classes=3, num_probes=4, layers=[0, 2], cross_attention="dna")
    with torch.no_grad():
        tokens = net.forward_intermediates(clip, [0, 2])
    assert len(tokens) == 2
    torch.testing.assert_close(tokens[0], captured[0])
    torch.testing.assert_close(tokens[1], captured[2])
    # Module k starts from block layers[k]: its spatial attention, norm1; Q-, V- = 1e-4 Q+, V+.
    for module, i in zip(probe.interactions, [0, 2]):
        block = net.blocks[i]
        assert torch.equal(module.attn.q.weight, block.attn.qkv.weight[:32])
        assert torch.equal(module.attn.kv.bias, block.attn.qkv.bias[32:])
        assert torch.equal(module.attn.proj.weight, block.attn.proj.weight)
        assert torch.equal(module.norm_context.weight, block.norm1.weight)
        torch.testing.assert_close(module.attn.v_neg.weight, 1e-4 * block.attn.qkv.weight[64:])
        # not DnA's own branch: the policy chose the scaled copy
        assert not torch.allclose(module.attn.q_neg.weight, block.attn.q_neg.weight)

    # The forward pass, written out: probes replaced module by module, mean, norm, head.
    probes = probe.probes.expand(2, -1, -1)
    for module, layer_tokens in zip(probe.interactions, tokens):
        probes = module.attn.forward_with_maps(module.norm_probes(probes), module.norm_context(layer_tokens))[0]
    expected = probe.head(probe.norm(probes.mean(1)))
    torch.testing.assert_close(probe(clip), expected)


def test_trainable_parameters_are_the_probes_modules_and_head_by_hand_count():
    d, heads, p, k, n = 32, 2, 4, 3, 2
    for kind, per_module in [("softmax", 4 * (d * d + d)), ("dna", 6 * (d * d + d) + heads)]:
        model = ProbeClassifierModule(num_classes=k, num_frames=4, img_size=32,
                                      probe=ProbeOptions(num_probes=p, cross_attention=kind), **BACKBONE)
        trainable = sum(q.numel() for q in model.parameters() if q.requires_grad)
        norms = 2 * 2 * d  # norm over the probes and over the tokens
        assert trainable == p * d + n * (per_module + norms) + 2 * d + (d * k + k), kind
        residual = ProbeClassifierModule(num_classes=k, num_frames=4, img_size=32, **BACKBONE,
                                         probe=ProbeOptions(num_probes=p, cross_attention=kind, interaction="residual"))
        mlp = 2 * d * 2 * d + 2 * d + d + 2 * d  # fc1, fc2 (mlp_ratio 2) and norm2
        assert sum(q.numel() for q in residual.parameters() if q.requires_grad) == trainable + n * mlp
        assert [g["name"] for g in model.configure_optimizers()["optimizer"].param_groups] == ["probe"]


def test_a_probe_fit_leaves_the_backbone_untouched_and_never_builds_its_graph():
    torch.manual_seed(0)
    # Drop-path and dropout in the backbone: only eval mode keeps its features fixed.
    model = ProbeClassifierModule(num_classes=3, num_frames=4, img_size=32,
                                  probe=ProbeOptions(num_probes=4, cross_attention="dna"),
                                  network=TimeSformerSpec(arch="tiny", **GEOMETRY, drop_rate=0.3, drop_path_rate=0.5,
                                                          head_dropout=0.0),
                                  optimizer={"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-2}},
                                  lr_scheduler=None)
    backbone_net = model.net.backbone
    before = {k: v.clone() for k, v in backbone_net.state_dict().items()}
    probe_before = {k: v.clone() for k, v in model.net.state_dict().items() if not k.startswith("backbone.")}
    seen = []
    intermediates = backbone_net.forward_intermediates

    def recording(*args, **kwargs):
        out = intermediates(*args, **kwargs)
        seen.append((torch.is_grad_enabled(), any(t.requires_grad for t in out), backbone_net.training,
                     any(m.training for m in backbone_net.modules()), model.net.interactions.training))
        return out

    backbone_net.forward_intermediates = recording
    clips = [{"video": video(seed=s), "label": torch.tensor([0, 2])} for s in range(3)]
    views = [{"video": video(seed=9).unsqueeze(1), "label": torch.tensor([0, 1])}]
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, DataLoader(clips, batch_size=None), DataLoader(views, batch_size=None))

    train_calls = [s for s in seen if s[4]]
    assert len(train_calls) == 6 and set(train_calls) == {(False, False, False, False, True)}
    assert all(p.grad is None for p in backbone_net.parameters())
    after = backbone_net.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    changed = {k for k, v in model.net.state_dict().items() if k in probe_before and not torch.equal(v, probe_before[k])}
    assert {"probes", "head.weight", "interactions.1.attn.q_neg.weight", "interactions.0.attn.neg_scalers"} <= changed


# -- the backbone from every checkpoint kind ---------------------------------------------------
def lightning_ckpt(tmp_path, attention="dna"):
    """A real checkpoint of this project: a tiny VideoClassifier after one training step."""
    torch.manual_seed(0)
    model = VideoClassifier(num_classes=5, num_frames=4, img_size=32,
                            network=TimeSformerSpec(**BACKBONE_NET, attention=attention))
    data = [{"video": video(1, seed=i)[0], "label": i % 5} for i in range(2)]
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=2))
    path = tmp_path / "quickstart.ckpt"
    trainer.save_checkpoint(path)
    return path, model.net.state_dict()


def official(state):
    return {"model_state": {f"model.{k}": v for k, v in state.items()}, "epoch": 15}


@pytest.mark.parametrize("kind", ["ours", "official_softmax", "dna_reference", "timm_vit", "dna_vit_fused", "huggingface"])
def test_backbone_from_each_checkpoint_kind(tmp_path, kind):
    attention = "softmax" if kind in ("official_softmax", "timm_vit", "huggingface") else "dna"
    if kind == "ours":
        path, state = lightning_ckpt(tmp_path)
    elif kind in ("official_softmax", "dna_reference"):
        state = backbone(attention).state_dict()
        path = save(official(state), tmp_path / f"{kind}.pyth")
    elif kind == "timm_vit":
        vit = randomise(tiny_vit())
        state = vit.state_dict()
        path = save(state, tmp_path / "vit.pth")
    elif kind == "dna_vit_fused":  # rows [Q+; Q-; K; V+; V-]
        fused = random_dna_vit_state()
        w = fused["blocks.1.attn.qqkvv.weight"]
        state = {k: v for k, v in fused.items() if "qqkvv" not in k}
        state["blocks.1.attn.qkv.weight"] = torch.cat([w[:32], w[64:128]])
        path = save({"model": fused}, tmp_path / "dna_vit.pth")
    else:
        hf = tiny_hf()
        hf.save_pretrained(tmp_path / "hf")
        path, state = tmp_path / "hf", None
    model = ProbeClassifierModule(num_classes=3, num_frames=4, img_size=32,
                                  network=TimeSformerSpec(**BACKBONE_NET, attention=attention),
                                  probe=ProbeOptions(num_probes=4, cross_attention="dna",
                                                     neg_init="copy" if attention == "dna" else "scaled_copy"),
                                  init=PretrainedWeights(source=str(path)))
    net = model.net.backbone
    assert model.init_report is not None and not any(p.requires_grad for p in net.parameters())
    loaded = net.state_dict()
    if state is not None:
        for key in ["blocks.1.attn.qkv.weight", "blocks.0.mlp.fc2.bias", "patch_embed.proj.weight", "norm.weight"]:
            assert torch.equal(loaded[key], state[key]), key
    else:
        hf_state = hf.state_dict()
        assert torch.equal(loaded["blocks.1.attn.qkv.weight"],
                           hf_state["timesformer.encoder.layer.1.attention.attention.qkv.weight"])
    if kind in ("ours", "dna_reference", "official_softmax"):  # TimeSformer layouts: every tensor
        assert all(torch.equal(v, state[k]) for k, v in loaded.items())
    if kind in ("ours", "dna_reference"):
        assert torch.equal(loaded["blocks.0.temporal_attn.q_neg.weight"], state["blocks.0.temporal_attn.q_neg.weight"])
    if attention == "dna":  # neg_init copy: the backbone block's own Q-, V- and alpha
        assert torch.equal(model.net.interactions[1].attn.q_neg.weight, loaded["blocks.1.attn.q_neg.weight"])
        assert torch.equal(model.net.interactions[0].attn.neg_scalers, loaded["blocks.0.attn.neg_scalers"])
    if kind == "dna_vit_fused":
        assert torch.equal(loaded["blocks.1.attn.q_neg.weight"], w[32:64])
    # The interaction modules start from the imported blocks, and the probe classifies.
    assert torch.equal(model.net.interactions[1].attn.kv.weight, loaded["blocks.1.attn.qkv.weight"][32:])
    assert model(video()).shape == (2, 3)


def test_a_backbone_checkpoint_the_model_does_not_fully_use_is_refused(tmp_path):
    path = save(official(backbone("dna").state_dict()), tmp_path / "dna_k400.pyth")
    with pytest.raises(CheckpointError, match=r"(?s)20 tensors of the backbone checkpoint are not used.*"
                                              r"blocks\.0\.attn\.q_neg.*checkpoints inspect"):
        ProbeClassifierModule(num_classes=3, num_frames=4, img_size=32,
                              network=TimeSformerSpec(**BACKBONE_NET, attention="softmax"),
                              init=PretrainedWeights(source=str(path)))
    # The backbone is always frozen: the probe takes no freeze_backbone option.
    with pytest.raises(TypeError, match="freeze_backbone"):
        ProbeClassifierModule(num_classes=3, num_frames=4, img_size=32, freeze_backbone=True, **BACKBONE)


# -- the command line on generated videos ------------------------------------------------------
K = len(SYNTHETIC_CLASSES)
TESTED = 3 * 4  # test videos in 3 batches of 4


@pytest.mark.slow
def test_probe_fit_and_test_through_the_command_line(synthetic_root, tmp_path):
    ckpt, state = lightning_ckpt(tmp_path)
    args = [
        "--config", "configs/probe_quickstart.yaml",
        f"--data.init_args.root={synthetic_root}",
        "--data.init_args.videos_per_subject_class=1",
        "--data.init_args.num_workers=0",
        "--data.init_args.batch_size=4",
        "--data.init_args.num_frames=4",
        "--data.init_args.crop_size=32",
        "--data.init_args.train_short_side=[32, 36]",
        *(f"--model.network.{k}={v}" for k, v in GEOMETRY.items()),
        f"--model.init.source={ckpt}",
        "--model.probe.num_probes=4",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--trainer.logger.init_args.name=probe",
        "--trainer.enable_progress_bar=false",
        "--data.init_args.val_num_crops=1",
        "--data.init_args.test_num_crops=1",
        "--trainer.limit_test_batches=3",
    ]
    cli = main(["fit", *args, "--trainer.max_epochs=1", "--trainer.limit_train_batches=3",
                "--trainer.limit_val_batches=2", "--trainer.log_every_n_steps=1"])
    assert isinstance(cli.model.net, ProbeClassifier) and len(cli.model.net.interactions) == 2
    assert cli.model.net.head.out_features == K
    # The backbone is the checkpoint's network, unchanged by the fit.
    backbone_state = cli.model.net.backbone.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in backbone_state.items() if not k.startswith("head."))
    run = tmp_path / "probe" / "version_0"
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    columns = set().union(*rows)
    assert {"train/loss", "val/top1", "test/top1", "test/mca", "alpha/interactions.0.attn"} <= columns
    test_row = next(r for r in rows if r.get("test/top1"))
    top1 = float(test_row["test/top1"])
    assert abs(top1 * TESTED - round(top1 * TESTED)) < 1e-4  # per video

    # The probe checkpoint restores without the backbone's file.
    last = run / "checkpoints" / "last.ckpt"
    ckpt.unlink()
    restored = ProbeClassifierModule.load_from_checkpoint(last)
    saved = torch.load(last, weights_only=False)
    assert saved["hyper_parameters"]["init"]["source"] is None and saved["initialised_from"] == str(ckpt)
    assert all(torch.equal(v, cli.model.state_dict()[k]) for k, v in restored.state_dict().items())
    # One epoch: the best checkpoint tested after fit is the last one; testing it again from
    # the file gives the same figures.
    main(["test", *args, "--model.init.source=null", f"--ckpt_path={last}"])
    with open(run / "test" / "metrics.csv") as f:  # evaluations log inside the checkpoint's run
        again = next(r for r in csv.DictReader(f) if r.get("test/top1"))
    assert float(again["test/top1"]) == top1
    assert float(again["test/loss"]) == pytest.approx(float(test_row["test/loss"]), rel=1e-5)


def test_paper_probe_config_resolves_to_the_viscop_geometry_on_timesformer_b(synthetic_root):
    parser = main(["--config", "configs/probe_quickstart.yaml", f"--data.init_args.root={synthetic_root}",
                   "--trainer.logger=false", "--model.init.source=null"], run=False).parser
    config = parser.parse_args(["--config", "configs/probe_paper.yaml", "--data.init_args.root=/data/x"]).as_dict()
    model, data = config["model"]["init_args"], config["data"]["init_args"]
    assert config["model"]["class_path"] == "dna_video.tasks.ProbeClassifierModule"
    network, probe = model["network"], model["probe"]
    assert (network["arch"], network["attention"], probe["num_probes"], probe["layers"]) == ("base", "dna", 16, None)
    assert (probe["cross_attention"], probe["interaction"], probe["neg_init"], probe["neg_init_eps"]) == (
        "dna", "replace", "scaled_copy", 1e-4)
    assert (data["num_frames"], data["crop_size"], data["protocol"]) == (8, 224, "cs")
    assert config["data"]["class_path"] == "dna_video.data.ToyotaSmarthome"
