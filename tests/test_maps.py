"""Attention maps: a model whose attention is set to point at known patches and frames (so
patch order, grid orientation and frame order are checked against an answer known by
construction), maps that are distributions, the written-out path equal to the fused forward,
rollout, and the `analyze maps` figures."""

import numpy as np
import pytest
import torch
from PIL import Image

from dna_video.analysis import maps as attention_maps
from dna_video.models.timesformer import TimeSformer

T, PATCH, SIDE = 3, 8, 32  # a 4 x 4 patch grid
DIM, HEADS = 32, 2
BIG = 10.0
# Per frame: (row, col) of the bright patch (the positive branch / softmax should attend to it)
# and of the dark patch (the negative branch should). Rows differ from columns so that a
# transposed grid shows.
BRIGHT = [(0, 3), (2, 1), (3, 2)]
DARK = [(1, 0), (3, 3), (0, 2)]
TEMPORAL_POS, TEMPORAL_NEG = 2, 0  # frames every frame should attend to, per branch


def pointing_model(attention: str) -> TimeSformer:
    """One block, weights set so that:

    * patch tokens carry +-BIG in dimension 0 where the video holds a bright (+1) / dark (-1)
      patch (patch embedding = mean pixel value in that dimension, nothing else), and
      time_embed carries +BIG in dimension 1 for frame TEMPORAL_POS, -BIG for TEMPORAL_NEG;
    * the spatial attention's keys read dimension 0 and its queries are a constant (bias)
      along it: cls -> the bright patch (softmax) and, with softmin, -> the dark one;
    * the temporal attention does the same along dimension 1;
    * the cls token and pos_embed are zero, LayerNorms plain, temporal_fc zero (initial)."""
    net = TimeSformer(num_classes=3, img_size=SIDE, num_frames=T, patch_size=PATCH, embed_dim=DIM, depth=1,
                      num_heads=HEADS, attention=attention, drop_path_rate=0.0)
    d = DIM // HEADS
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        for norm in (net.blocks[0].norm1, net.blocks[0].temporal_norm1, net.blocks[0].norm2, net.norm):
            norm.weight.fill_(1.0)
        net.patch_embed.proj.weight[0].fill_(BIG / (3 * PATCH * PATCH))
        net.time_embed[0, TEMPORAL_POS, 1] = BIG
        net.time_embed[0, TEMPORAL_NEG, 1] = -BIG
        for module, feature in ((net.blocks[0].attn, 0), (net.blocks[0].temporal_attn, 1)):
            for h in range(HEADS):
                module.qkv.weight[DIM + h * d, feature] = 1.0  # K_h reads the feature
                module.qkv.bias[h * d] = BIG  # Q+_h: a constant along it
                if attention == "dna":
                    module.q_neg.bias[h * d] = BIG  # softmin: the most NEGATIVE key wins
            if attention == "dna":
                module.neg_scalers.fill_(0.5)
    return net.eval()


def pointing_video() -> torch.Tensor:
    video = torch.zeros(1, 3, T, SIDE, SIDE)
    for t, ((br, bc), (dr, dc)) in enumerate(zip(BRIGHT, DARK)):
        video[0, :, t, br * PATCH:(br + 1) * PATCH, bc * PATCH:(bc + 1) * PATCH] = 1.0
        video[0, :, t, dr * PATCH:(dr + 1) * PATCH, dc * PATCH:(dc + 1) * PATCH] = -1.0
    return video


def argmax_cell(grid: torch.Tensor) -> tuple[int, int]:
    flat = int(grid.argmax())
    return flat // grid.shape[1], flat % grid.shape[1]


@pytest.mark.parametrize("attention", ["dna", "softmax"])
def test_maps_point_where_the_weights_say(attention):
    net = pointing_model(attention)
    video = pointing_video()
    logits, captured = attention_maps.capture_maps(net, video, attention_maps.attention_module_names(net, [-1]))
    spatial = attention_maps.cls_maps(captured["blocks.0.attn"], T, attention_maps.grid_of(net, video))
    temporal = attention_maps.temporal_maps(captured["blocks.0.temporal_attn"], 1)
    main = "positive" if attention == "dna" else "softmax"
    assert set(spatial) == ({"positive", "negative"} if attention == "dna" else {"softmax"})
    for t in range(T):
        assert argmax_cell(spatial[main][0, t]) == BRIGHT[t]
        assert spatial[main][0, t].max() > 0.9  # nearly all of the cls token's attention
        if attention == "dna":
            assert argmax_cell(spatial["negative"][0, t]) == DARK[t]
            assert spatial["negative"][0, t].max() > 0.9
    # Temporal: every query frame attends to TEMPORAL_POS (positive) / TEMPORAL_NEG (negative),
    # at every location (the mean over locations is still peaked there).
    assert (temporal[main][0].argmax(dim=1) == TEMPORAL_POS).all()
    if attention == "dna":
        assert (temporal["negative"][0].argmax(dim=1) == TEMPORAL_NEG).all()


def random_model(attention: str, depth: int = 2) -> TimeSformer:
    torch.manual_seed(0)
    net = TimeSformer(num_classes=4, img_size=SIDE, num_frames=T, patch_size=PATCH, embed_dim=DIM, depth=depth,
                      num_heads=HEADS, attention=attention, drop_path_rate=0.0)
    with torch.no_grad():  # a trained-looking model: temporal path on, embeddings non-zero
        for block in net.blocks:
            block.temporal_fc.weight.normal_(0, 0.05)
        net.time_embed.normal_(0, 0.5)
        for p in net.parameters():
            p.mul_(3.0)
    return net.eval()


@pytest.mark.parametrize("attention", ["dna", "softmax"])
def test_maps_are_distributions_and_the_written_out_forward_equals_the_fused_one(attention):
    net = random_model(attention)
    video = torch.randn(2, 3, T, SIDE, SIDE)
    with torch.no_grad():
        fused = net(video)
    logits, captured = attention_maps.capture_maps(net, video)
    assert set(captured) == set(net.attention_modules())  # every module, both kinds
    torch.testing.assert_close(logits, fused, atol=1e-5, rtol=1e-5)
    n = (SIDE // PATCH) ** 2
    for name, maps in captured.items():
        assert set(maps) == ({"positive", "negative"} if attention == "dna" else {"attn"})
        for attn in maps.values():
            shape = (2 * T, HEADS, 1 + n, 1 + n) if name.endswith(".attn") else (2 * n, HEADS, T, T)
            assert attn.shape == shape
            torch.testing.assert_close(attn.sum(-1), torch.ones(shape[:-1]))
            assert (attn >= 0).all()
    # After capture the modules are back on their fused path.
    assert all("forward" not in vars(m) for m in net.attention_modules().values())
    # The maps of video 1 are the second half of the batch axis: cls_maps splits (b t) right.
    spatial = attention_maps.cls_maps(captured["blocks.1.attn"], T, (4, 4))
    first = next(iter(captured["blocks.1.attn"].values()))
    torch.testing.assert_close(spatial[next(iter(spatial))][1, 2].flatten(), first[T + 2, :, 0, 1:].mean(0))


def test_rollout_follows_the_pointed_patches_and_keeps_the_cls_row_stochastic():
    net = pointing_model("softmax")
    with torch.no_grad():  # uniform temporal attention: rollout must still find each frame's patch
        net.blocks[0].temporal_attn.qkv.weight.zero_()
        net.blocks[0].temporal_attn.qkv.bias.zero_()
    video = pointing_video()
    _, captured = attention_maps.capture_maps(net, video)
    rolled = attention_maps.rollout(net, {k: v for k, v in captured.items()}, T, (4, 4))
    assert rolled.shape == (T, 4, 4)
    for t in range(T):
        assert argmax_cell(rolled[t]) == BRIGHT[t]
    # Row 0 of the rollout is a distribution over [cls, patches]: the patch part is below 1,
    # and the cls share is at least the residual's half.
    assert 0 < float(rolled.sum()) <= 0.5 + 1e-6


def test_analyze_maps_writes_figures_of_the_expected_size(tmp_path, tiny_checkpoint, new_videos):
    from dna_video.tools.analyze import main

    ckpt, settings = tiny_checkpoint
    video = new_videos["bright"]
    assert main(["maps", str(ckpt), str(video), "--out", str(tmp_path), "--rollout"]) == 0
    stem = f"{video.stem}_layer0"
    grid = Image.open(tmp_path / f"{stem}_maps.png")
    grid.load()
    pixels = np.asarray(grid.convert("RGB"))
    assert pixels.std() > 10  # not blank
    # Frames across (1.6 in each at 100 dpi, less the trimmed margins), rows down: input,
    # positive, negative, rollout.
    assert grid.width >= settings["num_frames"] * 120 and grid.height >= 4 * 120
    gif = Image.open(tmp_path / f"{stem}_maps.gif")
    assert gif.n_frames == settings["num_frames"]
    crop = settings["crop_size"]
    # Each GIF frame: input + positive + negative + rollout panels, each enlarged twice, with a
    # title and name strip above and the colour scales below.
    assert gif.size[0] == 4 * crop * 2 and gif.size[1] > crop * 2
    temporal = Image.open(tmp_path / f"{stem}_temporal.png")
    assert np.asarray(temporal.convert("RGB")).std() > 10
    saved = torch.load(tmp_path / f"{stem}_maps.pt")
    assert set(saved["spatial"]) == {"positive", "negative", "rollout (positive)"}
    g = crop // 8
    assert saved["spatial"]["positive"].shape == (settings["num_frames"], g, g)
    torch.testing.assert_close(saved["temporal"]["negative"].sum(-1), torch.ones(settings["num_frames"]))


def test_rollout_of_two_blocks_multiplies_them_in_order():
    """Rollout against a hand-built token mixing per block (explicit loops over tokens), for
    two blocks with different random maps: the product is block 2 after block 1, not the reverse."""
    from types import SimpleNamespace

    t, grid = 2, (1, 2)
    n = grid[0] * grid[1]
    g = torch.Generator().manual_seed(0)

    def rows(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64).softmax(-1)

    maps = {}
    for b in range(2):
        maps[f"blocks.{b}.temporal_attn"] = {"attn": rows(n, 2, t, t)}  # (locations, heads, t, t)
        maps[f"blocks.{b}.attn"] = {"attn": rows(t, 2, 1 + n, 1 + n)}  # (frames, heads, cls + patches)
    size = 1 + n * t

    def token(p, f):  # the (n t) order: patch-major, time-minor, after the cls token
        return 1 + p * t + f

    def layer(b):
        temporal = maps[f"blocks.{b}.temporal_attn"]["attn"].mean(1)
        spatial = maps[f"blocks.{b}.attn"]["attn"].mean(1)
        mix_t, mix_s = torch.eye(size, dtype=torch.float64), torch.zeros(size, size, dtype=torch.float64)
        for p in range(n):
            for f in range(t):
                for u in range(t):
                    mix_t[token(p, f), token(p, u)] = temporal[p, f, u]
                mix_s[token(p, f), 0] = spatial[f, 1 + p, 0]
                for q in range(n):
                    mix_s[token(p, f), token(q, f)] = spatial[f, 1 + p, 1 + q]
        mix_s[0, 0] = spatial[:, 0, 0].mean()
        for q in range(n):
            for f in range(t):
                mix_s[0, token(q, f)] = spatial[f, 0, 1 + q] / t
        eye = torch.eye(size, dtype=torch.float64)
        return (0.5 * (eye + mix_s)) @ (0.5 * (eye + mix_t))

    expected = layer(1) @ layer(0)
    reversed_order = layer(0) @ layer(1)
    rolled = attention_maps.rollout(SimpleNamespace(blocks=[None, None]), maps, t, grid)
    want = torch.tensor([[[float(expected[0, token(p, f)]) for p in range(n)]] for f in range(t)])
    torch.testing.assert_close(rolled, want.float())
    other = torch.tensor([[[float(reversed_order[0, token(p, f)]) for p in range(n)]] for f in range(t)])
    assert not torch.allclose(rolled, other.float(), atol=1e-4)  # the order is visible in the result
