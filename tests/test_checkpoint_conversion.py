"""Checkpoint conversion as data (the report's reasons drive the initialisations), head values
after an import, the official TimeSformer's flattened 1-D resampling, and the export back to
the reference TimeSformer's .pyth."""

import pytest
import torch
from test_checkpoints import TOL, clip, ours, randomise, save, tiny_vit

from dna_video.checkpoints import (
    CheckpointError,
    Outcome,
    Reason,
    TargetModel,
    convert_checkpoint,
    load_pretrained,
    read_official,
    timesformer_from_checkpoint,
)
from dna_video.export.reference import export_reference
from dna_video.tools.export import main as export_main


def sentinel_head(model, value=7.0):
    """A head no import would produce, so that what the import leaves is its own doing."""
    with torch.no_grad():
        model.head.weight.fill_(value)
        model.head.bias.fill_(value)
    return model


# -- head values --------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["timesformer", "vit"])
def test_head_of_another_class_count_is_freshly_initialised(tmp_path, source):
    # Seeded: timm's trunc_normal_ cuts at +/-2 absolute, not 2 std, so an unseeded head passes
    # the 5-std bound below only about 999 times in 1000.
    torch.manual_seed(0)
    checkpoint = randomise(ours("softmax", num_classes=9) if source == "timesformer" else tiny_vit(num_classes=9))
    old_head = checkpoint.head.weight.detach().clone()
    model = sentinel_head(ours("softmax", num_classes=64))
    report = load_pretrained(model, save(checkpoint.state_dict(), tmp_path / "m.pth"))
    assert report.unused["head.weight"] == "classes differ: 9 in the checkpoint, 64 here"
    head = model.head.weight.detach()
    # Not the checkpoint's rows (std 0.1 there), and no row of it anywhere in the new head.
    assert not torch.allclose(head[:9], old_head, atol=1e-3)
    assert torch.cdist(head, old_head).min() > 0.1
    # timm's trunc_normal_(std=0.02) on 64 x 32 values, zero bias.
    assert 0.018 < head.std().item() < 0.022 and abs(head.mean().item()) < 0.002
    assert head.abs().max() < 0.1
    assert torch.count_nonzero(model.head.bias) == 0


def test_head_of_the_same_class_count_is_the_checkpoints():
    checkpoint = randomise(ours("dna", num_classes=5))
    model = sentinel_head(ours("dna", num_classes=5))
    report = load_pretrained(model, checkpoint.state_dict())
    assert "head.weight" in report.loaded and "head.weight" not in report.initialised
    assert torch.equal(model.head.weight, checkpoint.head.weight)
    assert torch.equal(model.head.bias, checkpoint.head.bias)


# -- the conversion is pure; the report is data ----------------------------------------------------
def test_conversion_returns_data_and_leaves_the_model_alone():
    source = randomise(tiny_vit(num_classes=3))
    model = ours("dna", num_frames=8, img_size=48)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state, report = convert_checkpoint(read_official(source.state_dict()), TargetModel.of(model))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # What the model needs and the checkpoint lacks is absent; the rest has the model's shapes.
    assert set(state) | set(report.initialised) == set(before)
    assert all(state[k].shape == before[k].shape for k in state)
    reasons = {e.key: e.steps[0].reason for e in report.of(Outcome.INITIALISED)}
    assert reasons["head.weight"] is Reason.HEAD_CLASSES_DIFFER
    assert reasons["blocks.1.temporal_fc.bias"] is Reason.ZERO_START
    assert reasons["blocks.0.temporal_attn.v_neg.weight"] is Reason.DNA_INIT
    assert reasons["blocks.0.attn.neg_scalers"] is Reason.ALPHA_INIT
    assert reasons["time_embed"] is Reason.ZERO_START  # an image checkpoint: nothing to resample
    (pos_entry,) = report.of(Outcome.RESAMPLED)
    assert pos_entry.key == "pos_embed" and pos_entry.steps[0].fields == {"old": (4, 4), "new": (6, 6), "mode": "bicubic"}
    copied = {e.key: e.steps for e in report.of(Outcome.CONVERTED)}
    assert copied["blocks.0.temporal_attn.qkv.weight"][0].reason is Reason.COPIED_FROM_SPATIAL
    # The state loads with torch's own strictness check (only the reported keys missing).
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert set(missing) == set(report.initialised) and not unexpected


def test_a_checkpoint_with_half_a_negative_branch_is_refused():
    state = randomise(ours("dna")).state_dict()
    del state["blocks.1.attn.v_neg.weight"]
    model = ours("dna")
    with pytest.raises(CheckpointError, match=r"blocks\.1\.attn has only part of its negative branch"):
        load_pretrained(model, state)


# -- the official TimeSformer's own resampling ------------------------------------------------------
@pytest.mark.parametrize("side, frames", [(6, 8), (3, 3), (2, 2)])
def test_flat_nearest_is_the_official_1d_resampling_of_the_flattened_sequence(side, frames):
    source = randomise(ours("dna"))  # 4 x 4 patches, 4 frames
    target = ours("dna", num_frames=frames, img_size=8 * side)
    report = load_pretrained(target, source.state_dict(), pos_interpolation="flat_nearest", time_interpolation="nearest")
    assert report.resampled["pos_embed"] == f"grid 4x4 -> {side}x{side} (flat_nearest)"
    # Written out: new position i takes old position floor(i * N_old / N_new) of the
    # row-major patch sequence, the cls entry is kept; the same in time.
    n_new = side * side
    patches = source.pos_embed[0, 1:]
    expected = torch.cat([source.pos_embed[0, :1], patches[[i * 16 // n_new for i in range(n_new)]]])
    torch.testing.assert_close(target.pos_embed[0], expected, rtol=0, atol=0)
    expected_time = source.time_embed[0, [t * 4 // frames for t in range(frames)]]
    torch.testing.assert_close(target.time_embed[0], expected_time, rtol=0, atol=0)
    # Not the 2-D nearest resampling: the flattened sequence ignores the grid's rows.
    grid_2d = ours("dna", num_frames=frames, img_size=8 * side)
    load_pretrained(grid_2d, source.state_dict(), pos_interpolation="nearest")
    assert not torch.equal(grid_2d.pos_embed, target.pos_embed)


def test_unknown_interpolation_is_refused_before_reading():
    with pytest.raises(ValueError, match="unknown pos_interpolation 'area'; choose one of"):
        load_pretrained(ours(), "does-not-matter.pth", pos_interpolation="area")


# -- export back to the reference TimeSformer --------------------------------------------------------
def lightning_checkpoint(model, path, attention):
    """A checkpoint as this project's Lightning module writes it: the network under 'net.',
    its geometry in the hyper-parameters."""
    hparams = {"arch": "tiny", "net_kwargs": {"embed_dim": 32, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0},
               "num_classes": model.num_classes, "num_frames": 4, "img_size": 32, "attention": attention}
    return save({"pytorch-lightning_version": "2.6.6", "epoch": 3, "global_step": 12,
                 "state_dict": {f"net.{k}": v for k, v in model.state_dict().items()},
                 "hyper_parameters": hparams}, path)


@pytest.mark.parametrize("attention", ["softmax", "dna"])
def test_export_ref_writes_the_reference_layout_and_reads_back_to_equal_logits(tmp_path, attention):
    source = randomise(ours(attention, num_classes=3))
    ckpt = lightning_checkpoint(source, tmp_path / "last.ckpt", attention)
    out = tmp_path / "ref" / "model.pyth"
    assert export_main(["reference", str(ckpt), str(out), "--epoch", "15"]) == 0

    raw = torch.load(out, map_location="cpu", weights_only=True)
    assert set(raw) == {"model_state", "epoch", "cfg"} and raw["epoch"] == 15
    state = raw["model_state"]
    assert all(k.startswith("model.") for k in state)
    assert set(state) == {f"model.{k}" for k in source.state_dict()}
    assert {"model.head.weight", "model.head.bias", "model.blocks.0.attn.qkv.weight",
            "model.blocks.1.temporal_attn.qkv.bias"} <= set(state)
    dna_keys = {"model.blocks.0.attn.q_neg.weight", "model.blocks.0.attn.v_neg.bias", "model.blocks.0.attn.neg_scalers",
                "model.blocks.1.temporal_attn.q_neg.bias", "model.blocks.1.temporal_attn.v_neg.weight",
                "model.blocks.1.temporal_attn.neg_scalers"}
    assert dna_keys <= set(state) if attention == "dna" else not dna_keys & set(state)
    assert torch.equal(state["model.blocks.1.attn.qkv.weight"], source.blocks[1].attn.qkv.weight)
    assert "NUM_CLASSES: 3" in raw["cfg"] and "NUM_FRAMES: 4" in raw["cfg"]

    back, report = timesformer_from_checkpoint(out, num_heads=2, drop_path_rate=0.0)
    assert report.layout == "timesformer" and len(report.loaded) == len(state) and not report.problems()
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(clip()), source(clip()), **TOL)


def test_export_ref_refuses_a_model_without_head(tmp_path):
    with pytest.raises(CheckpointError, match="no classification head"):
        export_reference(ours("dna", num_classes=0), tmp_path / "x.pyth")


# -- found by mutation testing (CONTRIBUTING.md) --------------------------------------------------
def test_bad_import_options_name_the_value_and_the_choices():
    from dna_video.checkpoints.conversion import ImportOptions

    with pytest.raises(ValueError, match=r"^unknown dna_init 'copy'; choose one of \['random', 'scaled_copy', 'orthogonal'\]$"):
        ImportOptions(dna_init="copy")
    with pytest.raises(ValueError, match=r"^unknown pos_interpolation 'area'; choose one of \['bicubic', 'bilinear', 'nearest', 'flat_nearest'\]$"):
        ImportOptions(pos_interpolation="area")
    with pytest.raises(ValueError, match=r"^unknown time_interpolation 'cubic'; choose linear or nearest$"):
        ImportOptions(time_interpolation="cubic")


def test_headless_checkpoint_with_missing_and_foreign_tensors_reports_each_reason():
    """No head (a backbone), no final norm weight, two tensors the model does not have: each
    gets its own reason, the head is freshly initialised and the norm keeps the model's value."""
    torch.manual_seed(0)  # the head's 5-std bound below (see the fresh-head test)
    source = randomise(ours("softmax"))
    state = source.state_dict()
    for key in ("head.weight", "head.bias", "norm.weight"):
        del state[key]
    state["blocks.0.attn.extra.weight"] = torch.zeros(3)
    state["some_buffer"] = torch.zeros(3)
    model = sentinel_head(ours("softmax"))
    with torch.no_grad():
        model.norm.weight.fill_(3.0)
    report = load_pretrained(model, state, log_report=False)
    assert report.target == ("TimeSformer(attention=softmax, embed_dim=32, depth=2, heads=2, patch=8, frames=4, "
                             "img=32, classes=5)")
    assert report.initialised == {
        "head.weight": "re-initialised (not in the checkpoint)",
        "head.bias": "re-initialised (not in the checkpoint)",
        "norm.weight": "not in the checkpoint: the model's own initialisation",
    }
    assert report.unused == {"blocks.0.attn.extra.weight": "not a parameter of this model",
                             "some_buffer": "not a parameter of this model"}
    assert torch.count_nonzero(model.head.bias) == 0 and model.head.weight.abs().max() < 0.1
    assert torch.equal(model.norm.weight, torch.full((32,), 3.0))
    torch.testing.assert_close(model.norm.bias, source.norm.bias)


def test_negative_branches_are_judged_per_module(tmp_path):
    """A checkpoint with the whole negative branch of some attention modules and none of the
    others imports (the others get the policy); half a branch in one module is refused, and
    the error names what is there and what is missing."""
    state = randomise(ours("dna")).state_dict()
    absent = [k for k in state if k.startswith("blocks.1.attn.") and (".q_neg." in k or ".v_neg." in k)]
    model = ours("dna")
    report = load_pretrained(model, {k: v for k, v in state.items() if k not in absent}, log_report=False)
    assert sorted(k for k, r in report.initialised.items() if "neg" in k) == sorted(absent)
    torch.testing.assert_close(model.blocks[0].attn.v_neg.weight, state["blocks.0.attn.v_neg.weight"])
    half = save({k: v for k, v in state.items() if k != "blocks.1.attn.v_neg.weight"}, tmp_path / "half.pth")
    with pytest.raises(CheckpointError) as error:
        load_pretrained(ours("dna"), half, log_report=False)
    message = str(error.value)
    assert message.startswith(f"{half}: blocks.1.attn has only part of its negative branch")
    assert "blocks.1.attn.q_neg.weight" in message and "['blocks.1.attn.v_neg.weight'] not" in message


def test_a_checkpoint_of_another_width_is_refused_with_its_geometry_and_what_to_do():
    state = randomise(ours("softmax", embed_dim=48)).state_dict()
    with pytest.raises(CheckpointError) as error:
        load_pretrained(ours("softmax"), state, log_report=False)
    lines = str(error.value).splitlines()
    assert lines[0].endswith("does not fit the model:")
    assert "  norm.weight: checkpoint (48,), model (32,)" in lines
    assert lines[-3:] == [
        "The checkpoint's geometry: {'embed_dim': 48, 'depth': 2, 'patch_size': 8, 'mlp_ratio': 2.0, 'in_chans': 3}.",
        "The model: TimeSformer(attention=softmax, embed_dim=32, depth=2, heads=2, patch=8, frames=4, img=32, classes=5).",
        "Build the model with the checkpoint's width, depth, heads and patch size "
        "(e.g. model.network, or timesformer_from_checkpoint).",
    ]


def test_foreign_parts_are_listed_eight_at_most(tmp_path):
    state = randomise(ours("softmax")).state_dict()
    for i in range(10):
        state[f"blocks.{i}.ls1.gamma"] = torch.ones(32)
    path = save(state, tmp_path / "layerscale.pth")
    with pytest.raises(CheckpointError) as error:
        load_pretrained(ours("softmax"), path, log_report=False)
    message = str(error.value)
    assert message.startswith(f"{path}: parts this TimeSformer does not implement: blocks.0.ls1.gamma (LayerScale); ")
    assert message.count("(LayerScale)") == 8 and message.endswith("blocks.7.ls1.gamma (LayerScale)")


def test_a_pos_embed_that_is_no_square_grid_is_refused_naming_the_file(tmp_path):
    state = randomise(ours("softmax")).state_dict()
    state["pos_embed"] = state["pos_embed"][:, :11]  # cls + 10 patch positions
    path = save(state, tmp_path / "odd.pth")
    with pytest.raises(CheckpointError, match=rf"^{path}: pos_embed: 10 patch positions do not form a square grid"):
        load_pretrained(ours("softmax"), path, log_report=False)


def test_no_pos_embed_and_a_head_without_bias_of_another_class_count():
    state = randomise(ours("softmax", num_classes=9)).state_dict()
    del state["pos_embed"], state["head.bias"]
    model = ours("softmax")
    own_pos = model.pos_embed.detach().clone()
    report = load_pretrained(model, state, log_report=False)
    assert report.initialised["pos_embed"] == "not in the checkpoint: the model's own initialisation"
    assert report.unused == {"head.weight": "classes differ: 9 in the checkpoint, 5 here"}
    assert torch.equal(model.pos_embed, own_pos)


# -- found by mutation testing, second round (CONTRIBUTING.md) --------------------------------------
def test_keys_without_official_name_and_a_dropped_head_are_each_reported_unused():
    """Checkpoint keys that have no official name are reported (not silently lost), next to a
    head of another class count: the two kinds of unused entries together, each with its reason."""
    checkpoint = read_official(randomise(ours("softmax", num_classes=9)).state_dict())
    checkpoint = checkpoint._replace(unknown=["timesformer.embeddings.extra", "classifier.scale"])
    state, report = convert_checkpoint(checkpoint, TargetModel.of(ours("softmax")))
    unused = report.of(Outcome.UNUSED)
    assert [e.key for e in unused] == ["timesformer.embeddings.extra", "classifier.scale", "head.weight", "head.bias"]
    assert [[s.reason for s in e.steps] for e in unused] == [[Reason.NO_OFFICIAL_NAME]] * 2 + [[Reason.CLASSES_DIFFER]] * 2
    assert report.unused == {
        "timesformer.embeddings.extra": "no official TimeSformer name",
        "classifier.scale": "no official TimeSformer name",
        "head.weight": "classes differ: 9 in the checkpoint, 5 here",
        "head.bias": "classes differ: 9 in the checkpoint, 5 here",
    }
    assert "head.weight" not in state and "head.bias" not in state


def test_the_wrappers_removed_are_the_reports_notes():
    source = randomise(ours("softmax"))
    wrapped = {f"module.net.{k}": v for k, v in source.state_dict().items()}
    state, report = convert_checkpoint(read_official(wrapped), TargetModel.of(ours("softmax")))
    assert report.notes == ["prefix 'module.' removed", "prefix 'net.' removed"]
    assert "(prefix 'module.' removed; prefix 'net.' removed)" in report.table()
    assert all(torch.equal(state[k], v) for k, v in source.state_dict().items())


def _other_heads_error(raw):
    with pytest.raises(CheckpointError) as error:
        convert_checkpoint(read_official(raw), TargetModel.of(ours("softmax")))
    return str(error.value).splitlines()


def test_a_head_count_stated_by_a_hugging_face_config_is_checked_and_hinted():
    """The head count does not change a softmax checkpoint's shapes: only the config says it.
    A checkpoint of 4 heads for a 2-head model is refused, and the hint names num_heads."""
    from dna_video.checkpoints.io import RawCheckpoint
    from dna_video.checkpoints.layouts import hf_config_from_model

    four_heads = randomise(ours("softmax", num_heads=4))
    raw = RawCheckpoint("ckpt/config.json", "Hugging Face folder", four_heads.state_dict(),
                        hf_config=hf_config_from_model(four_heads))
    lines = _other_heads_error(raw)
    assert lines[:2] == ["ckpt/config.json does not fit the model:", "  num_heads: 4 in the checkpoint, 2 in the model"]
    assert lines[2] == ("The checkpoint's geometry: {'embed_dim': 32, 'depth': 2, 'num_heads': 4, 'patch_size': 8, "
                        "'mlp_ratio': 2.0, 'in_chans': 3}.")


def test_a_head_count_stated_by_lightning_hyper_parameters_is_checked_and_hinted():
    from dna_video.checkpoints.io import RawCheckpoint

    hparams = {"arch": "tiny", "net_kwargs": dict(embed_dim=32, depth=2, num_heads=4, patch_size=8, mlp_ratio=2.0)}
    raw = RawCheckpoint("run.ckpt", "Lightning checkpoint", randomise(ours("softmax", num_heads=4)).state_dict(),
                        hparams=hparams)
    lines = _other_heads_error(raw)
    assert lines[:2] == ["run.ckpt does not fit the model:", "  num_heads: 4 in the checkpoint, 2 in the model"]
    assert lines[2] == ("The checkpoint's geometry: {'embed_dim': 32, 'depth': 2, 'num_heads': 4, 'patch_size': 8, "
                        "'mlp_ratio': 2.0}.")


def test_no_hint_when_the_geometry_cannot_be_inferred():
    """No blocks at all: the depth is refused, and no geometry is guessed for the hint."""
    state = {k: v for k, v in randomise(ours("softmax")).state_dict().items() if not k.startswith("blocks.")}
    with pytest.raises(CheckpointError) as error:
        convert_checkpoint(read_official(state), TargetModel.of(ours("softmax")))
    assert str(error.value) == "<in-memory state dict> does not fit the model:\n  depth: 0 blocks in the checkpoint, 2 in the model"


def test_a_pos_embed_without_batch_axis_is_refused_with_both_shapes(tmp_path):
    """A 2-D pos_embed (17, 32) of the model's width is not resampled or given a cls entry:
    its shape is refused as it is."""
    state = randomise(ours("softmax")).state_dict()
    state["pos_embed"] = state["pos_embed"][0]
    with pytest.raises(CheckpointError) as error:
        convert_checkpoint(read_official(state), TargetModel.of(ours("softmax")))
    assert str(error.value).splitlines()[:2] == ["<in-memory state dict> does not fit the model:",
                                                 "  pos_embed: checkpoint (17, 32), model (1, 17, 32)"]
