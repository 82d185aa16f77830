"""Checkpoint import: tiny models in every source layout, compared logit for logit with the
source model (independent implementations where one exists: timm, Hugging Face transformers,
a written-out DnA-ViT), DnA initialisation policies, resampling, errors, export."""

import json
import math

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from einops import rearrange
from safetensors.torch import save_file
from scipy.linalg import subspace_angles

from dna_video.checkpoints import (
    CheckpointError,
    detect_layout,
    load_pretrained,
    read_checkpoint,
    timesformer_from_checkpoint,
)
from dna_video.export.huggingface import export_huggingface
from dna_video.tools.checkpoints import main as checkpoints_main
from dna_video.tools.export import main as export_main
from dna_video.models.timesformer import TimeSformer

GEOMETRY = dict(embed_dim=32, depth=2, num_heads=2, patch_size=8, mlp_ratio=2.0)
TOL = dict(atol=1e-5, rtol=1e-5)


def ours(attention="softmax", num_classes=5, num_frames=4, img_size=32, **kwargs):
    args = dict(GEOMETRY, drop_path_rate=0.0, num_classes=num_classes, num_frames=num_frames, img_size=img_size)
    return TimeSformer(attention=attention, **{**args, **kwargs}).eval()


def randomise(module, seed=0, std=0.1):
    """Random values in every tensor (LayerNorm weights around 1, alphas of both signs), so
    that no path is trivially zero: time_embed, temporal_fc and the negative branch count."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g) * std
            is_norm_weight = name.endswith("weight") and p.ndim == 1
            p.copy_(noise + 1.0 if is_norm_weight else noise if "neg_scalers" not in name else noise * 5)
    return module.eval()


def clip(t=4, size=32, seed=1):
    return torch.randn(2, 3, t, size, size, generator=torch.Generator().manual_seed(seed))


def still_video(frame, t):
    """(B, C, H, W) -> (B, C, T, H, W): the same frame T times."""
    return frame.unsqueeze(2).expand(-1, -1, t, -1, -1).contiguous()


def tiny_vit(**kwargs):
    args = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, num_classes=5)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, **{**args, **kwargs})


def save(state, path):
    if path.suffix == ".safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, path)
    else:
        torch.save(state, path)
    return path


# -- ImageNet ViT (timm) ------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".pth", ".bin", ".safetensors"])
@pytest.mark.parametrize("attention", ["softmax", "dna"])
def test_timm_vit_loads_into_the_spatial_path_and_starts_as_the_image_model(tmp_path, suffix, attention):
    vit = randomise(tiny_vit())
    path = save(vit.state_dict(), tmp_path / f"vit{suffix}")
    # alpha = 0: the DnA model with a fresh negative branch is the softmax model.
    model = ours(attention, attention_kwargs={"alpha_init": 0.0} if attention == "dna" else None)
    report = load_pretrained(model, path)

    frame = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(still_video(frame, 4)), vit(frame), **TOL)
    assert report.layout == "vit" and not report.unused and not report.resampled
    assert report.converted["blocks.1.temporal_attn.qkv.weight"] == "copied from the spatial attention"
    assert report.converted["blocks.0.temporal_norm1.bias"] == "copied from the spatial norm1"
    torch.testing.assert_close(model.blocks[1].temporal_attn.proj.weight, vit.blocks[1].attn.proj.weight)
    assert report.initialised["time_embed"].startswith("zero")
    assert torch.count_nonzero(model.blocks[0].temporal_fc.weight) == 0 and torch.count_nonzero(model.time_embed) == 0
    negative = {k for k in report.initialised if ".q_neg." in k or ".v_neg." in k}
    assert len(negative) == (16 if attention == "dna" else 0)  # 2 blocks x 2 attentions x (q, v) x (w, b)


def test_timm_vit_into_another_class_count_grid_and_frame_count(tmp_path):
    vit = randomise(tiny_vit())
    # A position embedding that grows down the rows and is constant along them, so that the
    # 2-D resampling can be checked for orientation independently of its implementation.
    direction = torch.randn(32)
    with torch.no_grad():
        rows = torch.arange(4.0).repeat_interleave(4)  # row of each patch, row-major
        vit.pos_embed[0, 1:] = rows[:, None] * direction
    model = ours("softmax", num_classes=7, num_frames=8, img_size=48)
    report = load_pretrained(model, save(vit.state_dict(), tmp_path / "vit.pth"))
    assert report.unused == {"head.weight": "classes differ: 5 in the checkpoint, 7 here",
                             "head.bias": "classes differ: 5 in the checkpoint, 7 here"}
    assert report.initialised["head.weight"].startswith("re-initialised (classes differ")
    # Re-initialised in its values: no row of the checkpoint's head (std 0.1 there), zero bias.
    head = model.head.weight.detach()
    assert (head[:, None] - vit.head.weight.detach()[None]).abs().amax(-1).min() > 1e-3
    assert torch.count_nonzero(model.head.bias) == 0 and torch.count_nonzero(vit.head.bias) > 0
    assert 0.01 < head.std().item() < 0.03
    assert report.resampled["pos_embed"] == "grid 4x4 -> 6x6 (bicubic)"
    assert model.pos_embed.shape == (1, 37, 32)
    torch.testing.assert_close(model.pos_embed[:, 0], vit.pos_embed[:, 0])  # cls entry kept
    grid = rearrange(model.pos_embed[0, 1:], "(h w) d -> h w d", h=6)
    torch.testing.assert_close(grid, grid[:, :1].expand(-1, 6, -1))  # still constant along rows
    along = grid[:, 0] @ direction
    assert torch.all(along[1:] > along[:-1])  # and still growing downwards
    assert model(clip(8, 48)).shape == (2, 7)


def test_timm_vit_with_layer_scale_is_refused(tmp_path):
    vit = tiny_vit(init_values=1e-5)
    with pytest.raises(CheckpointError, match=r"blocks\.0\.ls1\.gamma \(LayerScale\)"):
        load_pretrained(ours(), save(vit.state_dict(), tmp_path / "vit_ls.pth"))


# -- official TimeSformer and DnA reference --------------------------------------------------
@pytest.mark.parametrize("wrap", ["pyth", "plain", "state_dict", "model", "module"])
def test_official_timesformer_checkpoints_in_every_wrapper(tmp_path, wrap):
    source = randomise(ours("softmax"))
    sd = source.state_dict()
    obj = {
        "pyth": {"epoch": 15, "model_state": {f"model.{k}": v for k, v in sd.items()},
                 "optimizer_state": {"state": {}, "param_groups": []}, "cfg": "TRAIN:\n  ENABLE: true\n"},
        "plain": sd,
        "state_dict": {"state_dict": {f"module.{k}": v for k, v in sd.items()}, "epoch": 3},
        "model": {"model": sd, "args": None},
        "module": {"module": sd},
    }[wrap]
    path = save(obj, tmp_path / ("k400.pyth" if wrap == "pyth" else f"{wrap}.pth"))
    model = randomise(ours("softmax"), seed=7)
    report = load_pretrained(model, path, strict=True)
    assert report.layout == "timesformer" and len(report.loaded) == len(sd)
    assert not (report.converted or report.resampled or report.initialised or report.unused)
    with torch.no_grad():
        torch.testing.assert_close(model(clip()), source(clip()), **TOL)


def test_dna_reference_checkpoint_round_trip_and_into_softmax(tmp_path):
    source = randomise(ours("dna"))
    sd = source.state_dict()
    assert {"blocks.0.attn.q_neg.weight", "blocks.0.temporal_attn.v_neg.bias", "blocks.1.attn.neg_scalers"} <= set(sd)
    path = save({"model_state": {f"model.{k}": v for k, v in sd.items()}}, tmp_path / "dna_k400.pyth")
    model = ours("dna")
    load_pretrained(model, path, strict=True)
    with torch.no_grad():
        torch.testing.assert_close(model(clip()), source(clip()), **TOL)
    # Into a softmax model: the negative branches are reported unused (and strict refuses).
    report = load_pretrained(ours("softmax"), path)
    assert len(report.unused) == 2 * 2 * 5
    assert set(report.unused.values()) == {"negative branch: the model uses softmax attention"}
    with pytest.raises(CheckpointError, match=r"unused blocks\.0\.attn\.q_neg\.weight"):
        load_pretrained(ours("softmax"), path, strict=True)


def dna_vit_logits(sd, frame, num_heads, subtract=False):
    """The DnA-ViT image model written out: fused qqkvv rows [Q+; Q-; K; V+; V-], pos_embed on
    the patches only (the cls token has none), softmax(Q+K) V+ +/- alpha softmin(Q-K) V-."""
    p = sd["patch_embed.proj.weight"].shape[-1]
    x = F.conv2d(frame, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"], stride=p)
    x = rearrange(x, "b d h w -> b (h w) d") + sd["pos_embed"]
    x = torch.cat([sd["cls_token"].expand(x.shape[0], -1, -1), x], dim=1)
    dim = x.shape[-1]
    depth = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    for i in range(depth):
        w = {k.removeprefix(f"blocks.{i}."): v for k, v in sd.items() if k.startswith(f"blocks.{i}.")}
        h = F.layer_norm(x, (dim,), w["norm1.weight"], w["norm1.bias"], eps=1e-6)
        parts = rearrange(h @ w["attn.qqkvv.weight"].T + w["attn.qqkvv.bias"], "b l (s h d) -> s b h l d", s=5, h=num_heads)
        q_pos, q_neg, k, v_pos, v_neg = parts
        scale = (dim // num_heads) ** -0.5
        pos = torch.softmax(q_pos @ k.transpose(-1, -2) * scale, -1) @ v_pos
        neg = F.softmin(q_neg @ k.transpose(-1, -2) * scale, -1) @ v_neg
        alpha = w["attn.neg_scalers"].view(1, -1, 1, 1)
        out = rearrange(pos - alpha * neg if subtract else pos + alpha * neg, "b h l d -> b l (h d)")
        x = x + out @ w["attn.proj.weight"].T + w["attn.proj.bias"]
        h = F.layer_norm(x, (dim,), w["norm2.weight"], w["norm2.bias"], eps=1e-6)
        h = F.gelu(h @ w["mlp.fc1.weight"].T + w["mlp.fc1.bias"])
        x = x + h @ w["mlp.fc2.weight"].T + w["mlp.fc2.bias"]
    x = F.layer_norm(x, (dim,), sd["norm.weight"], sd["norm.bias"], eps=1e-6)
    return x[:, 0] @ sd["head.weight"].T + sd["head.bias"]


def random_dna_vit_state(dim=32, depth=2, heads=2, patch=8, grid=4, classes=5, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, mean=0.0):
        return torch.randn(*shape, generator=g) * 0.1 + mean

    sd = {"patch_embed.proj.weight": r(dim, 3, patch, patch), "patch_embed.proj.bias": r(dim),
          "cls_token": r(1, 1, dim), "pos_embed": r(1, grid * grid, dim),
          "norm.weight": r(dim, mean=1.0), "norm.bias": r(dim), "head.weight": r(classes, dim), "head.bias": r(classes)}
    for i in range(depth):
        b = f"blocks.{i}."
        sd |= {b + "norm1.weight": r(dim, mean=1.0), b + "norm1.bias": r(dim),
               b + "attn.qqkvv.weight": r(5 * dim, dim), b + "attn.qqkvv.bias": r(5 * dim),
               b + "attn.neg_scalers": r(heads) * 5, b + "attn.proj.weight": r(dim, dim), b + "attn.proj.bias": r(dim),
               b + "norm2.weight": r(dim, mean=1.0), b + "norm2.bias": r(dim),
               b + "mlp.fc1.weight": r(2 * dim, dim), b + "mlp.fc1.bias": r(2 * dim),
               b + "mlp.fc2.weight": r(dim, 2 * dim), b + "mlp.fc2.bias": r(dim)}
    return sd


@pytest.mark.parametrize("subtract", [False, True])
def test_dna_vit_fused_qqkvv_equals_the_written_out_image_model(tmp_path, subtract):
    sd = random_dna_vit_state()
    path = save({"model": sd, "epoch": 299}, tmp_path / "dna_vit.pth")
    model = ours("dna")
    report = load_pretrained(model, path, negate_v_neg=subtract, strict=False)
    frame = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(still_video(frame, 4)), dna_vit_logits(sd, frame, 2, subtract), **TOL)
    assert report.layout == "dna_vit_fused"
    assert report.converted["blocks.0.attn.q_neg.weight"] == "split from fused blocks.0.attn.qqkvv.weight"
    assert "zero cls entry" in report.converted["pos_embed"]
    # The temporal attention copies the whole spatial DnA module, negative branch included.
    torch.testing.assert_close(model.blocks[1].temporal_attn.v_neg.weight, model.blocks[1].attn.v_neg.weight)
    torch.testing.assert_close(model.blocks[1].temporal_attn.neg_scalers, sd["blocks.1.attn.neg_scalers"])
    assert set(report.initialised) == {"time_embed", "blocks.0.temporal_fc.weight", "blocks.0.temporal_fc.bias",
                                       "blocks.1.temporal_fc.weight", "blocks.1.temporal_fc.bias"}


# -- Hugging Face ------------------------------------------------------------------------------
def tiny_hf(layer_norm_eps=1e-6, num_labels=5, seed=0):
    transformers = pytest.importorskip("transformers")
    config = transformers.TimesformerConfig(
        image_size=32, patch_size=8, num_channels=3, num_frames=4, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, layer_norm_eps=layer_norm_eps, num_labels=num_labels,
    )
    torch.manual_seed(seed)
    return randomise(transformers.TimesformerForVideoClassification(config), seed=seed)


def hf_logits(hf, video):
    with torch.no_grad():
        return hf(pixel_values=rearrange(video, "b c t h w -> b t c h w")).logits


def test_huggingface_folder_builds_the_geometry_from_config_and_matches(tmp_path):
    hf = tiny_hf(layer_norm_eps=1e-5)  # a non-default eps must be honoured
    hf.save_pretrained(tmp_path / "hf")
    model, report = timesformer_from_checkpoint(tmp_path / "hf", drop_path_rate=0.0)
    model.eval()
    assert report.layout == "huggingface" and report.container.startswith("Hugging Face folder")
    assert (model.embed_dim, len(model.blocks), model.blocks[0].attn.num_heads, model.num_frames) == (32, 2, 2, 4)
    assert model.norm.eps == 1e-5 and model.blocks[0].mlp.fc1.out_features == 64
    assert not (report.initialised or report.unused) and len(report.converted) == len(hf.state_dict())
    video = clip()
    with torch.no_grad():
        torch.testing.assert_close(model(video), hf_logits(hf, video), **TOL)


def test_huggingface_state_dict_into_dna_model_with_alpha_zero(tmp_path):
    hf = tiny_hf()
    path = save(hf.state_dict(), tmp_path / "pytorch_model.bin")  # no config.json beside it
    model = ours("dna", attention_kwargs={"alpha_init": 0.0})
    report = load_pretrained(model, path, dna_init="orthogonal")
    assert report.layout == "huggingface" and not report.unused
    video = clip()
    with torch.no_grad():
        torch.testing.assert_close(model(video), hf_logits(hf, video), **TOL)


def test_export_to_huggingface_round_trip(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = randomise(ours("softmax", num_classes=3))
    export_huggingface(model, tmp_path / "export", class_names=["Cook", "Drink", "Walk"])
    hf = transformers.TimesformerForVideoClassification.from_pretrained(tmp_path / "export").eval()
    assert hf.config.id2label == {0: "Cook", 1: "Drink", 2: "Walk"}
    video = clip()
    with torch.no_grad():
        torch.testing.assert_close(hf_logits(hf, video), model(video), **TOL)
    back, _ = timesformer_from_checkpoint(tmp_path / "export", drop_path_rate=0.0)
    torch.testing.assert_close(back.eval()(video), model(video), **TOL)
    with pytest.raises(CheckpointError, match="only softmax"):
        export_huggingface(ours("dna"), tmp_path / "dna")


# -- DnA from softmax weights: the initialisation policies -----------------------------------
@pytest.mark.parametrize("policy", ["random", "scaled_copy", "orthogonal"])
def test_dna_with_alpha_zero_from_a_softmax_checkpoint_equals_the_softmax_model(policy):
    softmax = randomise(ours("softmax"))
    dna = ours("dna", attention_kwargs={"alpha_init": 0.0})
    load_pretrained(dna, softmax.state_dict(), dna_init=policy)
    with torch.no_grad():
        torch.testing.assert_close(dna(clip()), softmax(clip()), **TOL)
        # The branch is live: alpha != 0 changes the output (scaled_copy's V- is 1e-4 * V+).
        dna.blocks[0].attn.neg_scalers.fill_(1e4 if policy == "scaled_copy" else 1.0)
        assert not torch.allclose(dna(clip()), softmax(clip()), atol=1e-3)


def test_scaled_copy_is_eps_times_the_positive_projections():
    softmax = randomise(ours("softmax"))
    dna = ours("dna")
    report = load_pretrained(dna, softmax.state_dict(), dna_init="scaled_copy", dna_init_eps=1e-3)
    assert report.initialised["blocks.0.attn.q_neg.weight"] == "dna_init=scaled_copy (eps 0.001)"
    for name, attn in dna.attention_modules().items():
        w_q, _, w_v = attn.qkv.weight.split(32)
        b_q, _, b_v = attn.qkv.bias.split(32)
        torch.testing.assert_close(attn.q_neg.weight, 1e-3 * w_q, rtol=0, atol=0)
        torch.testing.assert_close(attn.v_neg.weight, 1e-3 * w_v, rtol=0, atol=0)
        torch.testing.assert_close(attn.q_neg.bias, 1e-3 * b_q, rtol=0, atol=0)
        torch.testing.assert_close(attn.v_neg.bias, 1e-3 * b_v, rtol=0, atol=0)


def principal_angles_deg(w_pos, w_neg, num_heads):
    """Per head, the principal angles (degrees) between the column spaces of the two
    projections in the math convention (D x d matrices)."""
    angles = []
    for a, b in zip(w_pos.chunk(num_heads), w_neg.chunk(num_heads)):
        angles.append(np.degrees(subspace_angles(a.detach().T.double().numpy(), b.detach().T.double().numpy())))
    return np.stack(angles)


def test_orthogonal_policy_puts_v_neg_at_right_angles_to_v_pos_with_matching_scale():
    torch.manual_seed(0)
    softmax = randomise(ours("softmax"))
    dna = ours("dna")
    load_pretrained(dna, softmax.state_dict(), dna_init="orthogonal")
    for attn in dna.attention_modules().values():
        w_v = attn.qkv.weight.split(32)[2]
        angles = principal_angles_deg(w_v, attn.v_neg.weight, 2)
        assert angles.shape == (2, 16) and angles.min() > 89.99
        for pos, neg in zip(w_v.chunk(2), attn.v_neg.weight.chunk(2)):
            torch.testing.assert_close(torch.linalg.matrix_norm(neg), torch.linalg.matrix_norm(pos))
        assert torch.count_nonzero(attn.v_neg.bias) == 0
    # The test can fail: independent random subspaces of R^32 are far from orthogonal.
    random_dna = ours("dna")
    load_pretrained(random_dna, softmax.state_dict(), dna_init="random")
    attn = random_dna.blocks[0].attn
    assert principal_angles_deg(attn.qkv.weight.split(32)[2], attn.v_neg.weight, 2).min() < 60


# -- resampling --------------------------------------------------------------------------------
def test_load_time_resampling_matches_the_source_model_run_at_the_new_geometry():
    # With nearest resampling, importing into 8 frames at 48 px must give the source model's
    # own forward-time resampling (official semantics) on the same clip.
    source = randomise(ours("dna"))
    target = ours("dna", num_frames=8, img_size=48)
    report = load_pretrained(target, source.state_dict(), pos_interpolation="nearest", time_interpolation="nearest")
    assert report.resampled == {"pos_embed": "grid 4x4 -> 6x6 (nearest)", "time_embed": "4 -> 8 frames (nearest)"}
    video = clip(8, 48)
    with torch.no_grad():
        torch.testing.assert_close(target(video), source(video), **TOL)
    linear = ours("dna", num_frames=8)
    load_pretrained(linear, source.state_dict())
    expected = F.interpolate(source.time_embed.transpose(1, 2), size=8, mode="linear", align_corners=False).transpose(1, 2)
    torch.testing.assert_close(linear.time_embed, expected)



def test_load_and_forward_time_resampling_agree_with_timm_and_torch():
    # Import-time (load_pretrained) and forward-time (TimeSformer) resampling share one code
    # path; both must equal timm's antialiased bicubic 2-D resampling and torch's 1-D linear.
    from timm.layers import resample_abs_pos_embed

    source = randomise(ours("softmax", embed_interpolation="bicubic"))
    for side in (6, 2):  # up and down (antialiasing only matters when shrinking)
        expected_pos = resample_abs_pos_embed(
            source.pos_embed, [side, side], old_size=[4, 4], num_prefix_tokens=1, interpolation="bicubic", antialias=True
        )
        target = ours("softmax", num_frames=8, img_size=8 * side)
        load_pretrained(target, source.state_dict(), pos_interpolation="bicubic", time_interpolation="linear")
        with torch.no_grad():
            torch.testing.assert_close(target.pos_embed, expected_pos)
            torch.testing.assert_close(source._pos_embed((side, side)), expected_pos)
    expected_time = F.interpolate(source.time_embed.transpose(1, 2), size=8, mode="linear", align_corners=False).transpose(1, 2)
    with torch.no_grad():
        torch.testing.assert_close(target.time_embed, expected_time)
        torch.testing.assert_close(source._time_embed(8), expected_time)  # bicubic -> linear in time


# -- errors and strict mode ----------------------------------------------------------------
def test_files_that_are_not_checkpoints_give_clear_errors(tmp_path):
    text = tmp_path / "notes.pth"
    text.write_text("hello, not a checkpoint\n")
    with pytest.raises(CheckpointError, match=r"notes\.pth: not a PyTorch checkpoint"):
        load_pretrained(ours(), text)
    garbage = tmp_path / "weights.safetensors"
    garbage.write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(CheckpointError, match=r"weights\.safetensors: not a safetensors file"):
        read_checkpoint(garbage)
    no_tensors = save({"epoch": 3, "cfg": "x"}, tmp_path / "meta.pth")
    with pytest.raises(CheckpointError, match=r"meta\.pth: no state dict found; top-level keys \['cfg', 'epoch'\]"):
        read_checkpoint(no_tensors)
    other_model = save({"conv1.weight": torch.zeros(3, 3)}, tmp_path / "resnet.pth")
    with pytest.raises(CheckpointError, match=r"resnet\.pth: not a TimeSformer, ViT, DnA or Hugging Face TimeSformer"):
        load_pretrained(ours(), other_model)
    # A stem without blocks (e.g. a truncated export): a checkpoint error, not a crash.
    stem = save({k: v for k, v in ours().state_dict().items() if not k.startswith("blocks.")}, tmp_path / "stem.pth")
    with pytest.raises(CheckpointError, match="depth: 0 blocks in the checkpoint, 2 in the model"):
        load_pretrained(ours(), stem)
    with pytest.raises(CheckpointError, match="no blocks.N"):
        timesformer_from_checkpoint(stem)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(CheckpointError, match="not a Hugging Face save_pretrained folder"):
        read_checkpoint(tmp_path / "empty_dir")
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        read_checkpoint(tmp_path / "missing.pth")


def test_incompatible_dimensions_name_the_key_and_both_shapes():
    wide = ours("softmax", embed_dim=64, num_heads=4)
    with pytest.raises(CheckpointError) as err:
        load_pretrained(ours("softmax"), wide.state_dict())
    message = str(err.value)
    assert "blocks.0.attn.qkv.weight: checkpoint (192, 64), model (96, 32)" in message
    assert "'embed_dim': 64" in message
    with pytest.raises(CheckpointError, match="depth: 3 blocks in the checkpoint, 2 in the model"):
        load_pretrained(ours(), ours(depth=3).state_dict())
    with pytest.raises(CheckpointError, match="num_heads: 4 in the checkpoint, 2 in the model"):
        load_pretrained(ours("dna"), ours("dna", num_heads=4).state_dict())
    model = ours()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError):
        load_pretrained(model, wide.state_dict())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # untouched


def test_strict_mode_lists_every_problem(tmp_path):
    vit = tiny_vit(num_classes=9)
    with pytest.raises(CheckpointError) as err:
        load_pretrained(ours("dna"), save(vit.state_dict(), tmp_path / "vit.pth"), strict=True)
    message = str(err.value)
    for expected in ["newly initialised time_embed", "newly initialised blocks.1.temporal_fc.bias",
                     "newly initialised blocks.0.attn.q_neg.weight (dna_init=random)",
                     "newly initialised head.weight (re-initialised (classes differ: 9 in the checkpoint, 5 here))",
                     "unused head.bias"]:
        assert expected in message, expected


def test_report_table_is_logged(caplog):
    caplog.set_level("INFO", logger="dna_video")
    load_pretrained(ours("dna", num_frames=8), randomise(ours("softmax")).state_dict())
    text = caplog.text
    assert "Checkpoint import: <in-memory state dict>" in text
    for row in ["loaded", "converted", "resampled", "initialised", "unused"]:
        assert f"  {row}" in text
    assert "time_embed: 4 -> 8 frames (linear)" in text
    assert "dna_init=random: blocks.*.attn.q_neg.weight" in text


def test_layout_detection():
    assert detect_layout(ours().state_dict()) == "timesformer"
    assert detect_layout(tiny_vit().state_dict()) == "vit"
    assert detect_layout(random_dna_vit_state()) == "dna_vit_fused"


def test_command_line_inspect_and_export(tmp_path, capsys):
    pytest.importorskip("transformers")
    source = randomise(ours("softmax", num_classes=3))
    path = save({"model_state": {f"model.{k}": v for k, v in source.state_dict().items()}}, tmp_path / "m.pyth")
    assert checkpoints_main(["inspect", str(path)]) == 1  # width 32: heads unknown
    assert "pass num_heads" in capsys.readouterr().err
    assert checkpoints_main(["inspect", str(path), "--num-heads", "2"]) == 0
    assert "layout: TimeSformer" in capsys.readouterr().out
    names = tmp_path / "classes.txt"
    names.write_text("a\nb\nc\n")
    assert export_main(["huggingface", str(path), str(tmp_path / "hf"), "--num-heads", "2", "--class-names", str(names)]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "a", "1": "b", "2": "c"} and config["num_frames"] == 4
    back, _ = timesformer_from_checkpoint(tmp_path / "hf", drop_path_rate=0.0)
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(clip()), source(clip()), **TOL)



def test_layout_errors_name_the_source_and_files_are_converted_once(tmp_path, monkeypatch):
    with pytest.raises(CheckpointError, match=r"^checkpoint: not a TimeSformer"):
        detect_layout({"conv1.weight": torch.zeros(1)})
    with pytest.raises(CheckpointError, match=r"^x\.pth: not a TimeSformer"):
        detect_layout({"conv1.weight": torch.zeros(1)}, where="x.pth")
    import dna_video.checkpoints.loading as loading

    calls = []
    real = loading.to_official
    monkeypatch.setattr(loading, "to_official", lambda *a: calls.append(a[1]) or real(*a))
    source = randomise(ours("dna"))
    model, report = timesformer_from_checkpoint(save(source.state_dict(), tmp_path / "m.pth"), drop_path_rate=0.0)
    assert calls == ["timesformer"] and report.layout == "timesformer" and not report.initialised
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(clip()), source(clip()), **TOL)


def test_hf_config_round_trip_reproduces_the_model_arguments():
    from dna_video.checkpoints import hf_config_to_kwargs
    from dna_video.checkpoints.layouts import hf_config_from_model

    args = dict(num_classes=3, img_size=48, patch_size=8, in_chans=2, num_frames=6, embed_dim=32, depth=3,
                num_heads=4, mlp_ratio=1.5, qkv_bias=False, norm_eps=1e-5)
    config = hf_config_from_model(TimeSformer(attention="softmax", **args))
    assert config["intermediate_size"] == 48 and config["qkv_bias"] is False and config["layer_norm_eps"] == 1e-5
    assert hf_config_to_kwargs(json.loads(json.dumps(config))) == args
    # Missing fields take transformers' TimesformerConfig defaults (ViT-B/16, 8 x 224 x 224).
    assert hf_config_to_kwargs({}) == dict(num_classes=2, img_size=224, patch_size=16, in_chans=3, num_frames=8,
                                           embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, qkv_bias=True,
                                           norm_eps=1e-6)

def test_geometry_inferred_from_a_standard_vit_width():
    state = {k: v for k, v in tiny_vit().state_dict().items()}
    from dna_video.checkpoints import infer_geometry

    geometry = infer_geometry(state)
    assert geometry == {"embed_dim": 32, "depth": 2, "patch_size": 8, "in_chans": 3, "mlp_ratio": 2.0,
                        "qkv_bias": True, "attention": "softmax", "num_classes": 5, "img_size": 32}
    assert math.isclose(infer_geometry(ours("dna").state_dict())["num_heads"], 2)
