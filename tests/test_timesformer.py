"""TimeSformer: shapes, official semantics at initialisation, names, parameter counts."""

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

from dna_video.models.attention import DenoisingAttention, SoftmaxAttention
from dna_video.models.timesformer import TimeSformer, timesformer


def tiny(**kwargs):
    args = dict(num_classes=5, img_size=32, num_frames=4, drop_path_rate=0.0)
    return timesformer("tiny", **{**args, **kwargs})


def image_vit_features(model: TimeSformer, frames: torch.Tensor) -> torch.Tensor:
    """The image ViT computation with the model's spatial weights: patch embedding, cls +
    pos_embed, blocks of (norm1, attn, residual, norm2, mlp, residual), final norm, cls."""
    proj = model.patch_embed.proj
    x = F.conv2d(frames, proj.weight, proj.bias, stride=model.patch_size)
    x = rearrange(x, "b d h w -> b (h w) d")
    x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + model.pos_embed
    for blk in model.blocks:
        x = x + blk.attn(blk.norm1(x))
        x = x + blk.mlp(blk.norm2(x))
    return model.norm(x)[:, 0]


@pytest.mark.parametrize("attention", ["softmax", "dna"])
@pytest.mark.parametrize("t,h,w", [(4, 32, 32), (8, 32, 32), (2, 48, 32), (1, 16, 64), (5, 40, 24)])
def test_output_shapes(attention, t, h, w):
    model = tiny(attention=attention).eval()
    video = torch.randn(2, 3, t, h, w)
    assert model(video).shape == (2, 5)
    assert model.forward_features(video).shape == (2, model.embed_dim)


def test_embeddings_are_resampled_for_other_geometry():
    model = tiny().eval()
    with torch.no_grad():
        model.time_embed.normal_()
    # Nearest resampling of a 4-frame time embedding to 8 frames repeats each entry twice.
    resampled = model._time_embed(8)
    torch.testing.assert_close(resampled, model.time_embed.repeat_interleave(2, dim=1))
    pos = model._pos_embed((8, 8))
    assert pos.shape == (1, 65, model.embed_dim)
    torch.testing.assert_close(pos[:, 0], model.pos_embed[:, 0])  # cls entry untouched
    grid = rearrange(model.pos_embed[:, 1:], "1 (h w) d -> 1 h w d", h=4)
    torch.testing.assert_close(rearrange(pos[:, 1:], "1 (h w) d -> 1 h w d", h=8), grid.repeat_interleave(2, 1).repeat_interleave(2, 2))


@pytest.mark.parametrize("attention", ["softmax", "dna"])
def test_identical_frames_at_init_equal_image_vit(attention):
    torch.manual_seed(0)
    model = tiny(attention=attention, num_frames=4).eval()
    frame = torch.randn(2, 3, 32, 32)
    video = frame.unsqueeze(2).expand(-1, -1, 4, -1, -1)
    for block in model.blocks:
        assert torch.count_nonzero(block.temporal_fc.weight) == 0
        assert torch.count_nonzero(block.temporal_fc.bias) == 0
    assert torch.count_nonzero(model.time_embed) == 0
    expected = image_vit_features(model, frame)
    torch.testing.assert_close(model.forward_features(video), expected, atol=1e-5, rtol=1e-5)


def test_temporal_path_reacts_to_frame_order_once_trained_weights_exist():
    torch.manual_seed(0)
    model = tiny(attention="dna").eval()
    video = torch.randn(1, 3, 4, 32, 32)
    reversed_video = video.flip(2)
    # At initialisation (zero temporal_fc, zero time_embed) frame order cannot matter.
    torch.testing.assert_close(model(video), model(reversed_video), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        model.time_embed.normal_(std=0.5)
        for block in model.blocks:
            block.temporal_fc.weight.normal_(std=0.1)
    assert not torch.allclose(model(video), model(reversed_video), atol=1e-4)
    # Which frame comes first is known only through time_embed (attention over time is
    # order-free): reversing the frames equals reversing time_embed, value for value.
    flipped = tiny(attention="dna").eval()
    flipped.load_state_dict(model.state_dict())
    with torch.no_grad():
        flipped.time_embed.copy_(model.time_embed.flip(1))
    torch.testing.assert_close(model(reversed_video), flipped(video), atol=1e-5, rtol=1e-5)
    assert (model(video) - model(reversed_video)).abs().max() > 1e-3  # 100 x the tolerance above


def test_same_attention_kind_in_both_paths_and_official_names():
    model = tiny(attention="dna")
    for block in model.blocks:
        assert isinstance(block.attn, DenoisingAttention)
        assert isinstance(block.temporal_attn, DenoisingAttention)
    names = set(model.state_dict())
    for key in [
        "cls_token", "pos_embed", "time_embed", "patch_embed.proj.weight", "patch_embed.proj.bias",
        "norm.weight", "head.weight", "head.bias",
        "blocks.0.norm1.weight", "blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight",
        "blocks.0.attn.q_neg.weight", "blocks.0.attn.v_neg.weight", "blocks.0.attn.neg_scalers",
        "blocks.3.temporal_norm1.weight", "blocks.3.temporal_attn.qkv.weight",
        "blocks.3.temporal_attn.neg_scalers", "blocks.3.temporal_fc.weight",
        "blocks.3.norm2.bias", "blocks.3.mlp.fc1.weight", "blocks.3.mlp.fc2.weight",
    ]:
        assert key in names, key
    softmax = tiny(attention="softmax")
    assert all(isinstance(b.temporal_attn, SoftmaxAttention) for b in softmax.blocks)
    # The softmax model's names are exactly the DnA model's minus the negative branch.
    extra = {k for k in names if ".q_neg." in k or ".v_neg." in k or k.endswith(".neg_scalers")}
    assert set(softmax.state_dict()) == names - extra


def test_drop_path_is_linear_over_depth():
    model = timesformer("tiny", num_classes=3, img_size=32, drop_path_rate=0.3)
    rates = [getattr(b.drop_path, "drop_prob", 0.0) for b in model.blocks]
    assert rates == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_base_parameter_counts(capsys, monkeypatch):
    # Counts need shapes only: no initialisation of 150 M numbers (most of the test's time).
    for module in (torch.nn.Linear, torch.nn.Conv2d, torch.nn.LayerNorm):
        monkeypatch.setattr(module, "reset_parameters", lambda self: None)
    monkeypatch.setattr(TimeSformer, "init_weights", lambda self: None)
    counts = {}
    for attention in ("softmax", "dna"):
        model = timesformer("base", num_classes=400, attention=attention)
        counts[attention] = sum(p.numel() for p in model.parameters())
    ratio = counts["dna"] / counts["softmax"]
    with capsys.disabled():
        print(f"\nTimeSformer-B params: softmax {counts['softmax'] / 1e6:.2f}M, dna {counts['dna'] / 1e6:.2f}M (+{(ratio - 1) * 100:.1f}%)")
    # 24 attention modules x (2 * (768^2 + 768) for Q-, V- + 12 alphas).
    assert counts["dna"] - counts["softmax"] == 24 * (2 * (768 * 768 + 768) + 12)
    assert 121e6 < counts["softmax"] < 122e6
    assert 1.22 < ratio < 1.24


def test_grad_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = tiny(attention="dna")
    ckpt = tiny(attention="dna", grad_checkpointing=True)
    ckpt.load_state_dict(model.state_dict())
    video = torch.randn(2, 3, 4, 32, 32)
    for m in (model, ckpt):
        m(video).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_reset_head_and_bad_geometry():
    model = tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.reset_head(11)
    assert model(torch.randn(1, 3, 4, 32, 32)).shape == (1, 11)
    # Fresh values: trunc_normal(0.02) weights, zero bias; nothing else touched.
    assert model.num_classes == 11 and model.head.weight.shape == (11, 64)
    assert 0.015 < model.head.weight.std().item() < 0.025 and torch.count_nonzero(model.head.bias) == 0
    for key, value in model.state_dict().items():
        if not key.startswith("head."):
            assert torch.equal(value, before[key]), key
    with pytest.raises(ValueError, match="not a multiple"):
        tiny(img_size=30)
    with pytest.raises(ValueError, match="unknown arch"):
        timesformer("huge", num_classes=3)
