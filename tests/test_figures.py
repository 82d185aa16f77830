"""Every picture explains itself: a title, labelled panels and axes, a colour bar whose label
gives the unit, a legend where colours mean something, and tick labels that do not overlap,
asserted on the Figure objects (and on the GIF's frames read back). A cog (signed) map is
named for its kind, drawn centred at 0, and refused by attention rollout."""

from __future__ import annotations

import os
from itertools import combinations

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from dna_video.analysis import maps as attention_maps
from dna_video.analysis.plotting import (
    SIGNED_UNIT,
    WEIGHT_UNIT,
    attention_gif,
    attention_gif_frames,
    attention_grid_figure,
    attention_grid_png,
    confusion_figure,
    subspace_figure,
    temporal_figure,
)
from dna_video.common import atomic
from dna_video.models.attention import attention_kind, kind_of
from dna_video.models.timesformer import TimeSformer

RNG = np.random.default_rng(0)


# -- what a figure must show --------------------------------------------------------------------


def overlapping_tick_labels(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of visible tick labels of one axis of ``fig`` whose drawn boxes overlap."""
    canvas = FigureCanvasAgg(fig)  # the canvas the figures are written with
    canvas.draw()
    renderer = canvas.get_renderer()
    pairs = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels]
            for (a, box_a), (b, box_b) in combinations(boxes, 2):
                width = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
                height = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
                if width > 0.5 and height > 0.5:
                    pairs.append((a, b))
    return pairs


def colour_bars(fig: Figure) -> list:
    """The colour bars of ``fig`` (their axes carry the Colorbar)."""
    return [ax._colorbar for ax in fig.axes if getattr(ax, "_colorbar", None) is not None]


def bar_label(bar) -> str:
    return (bar.ax.get_ylabel() or bar.ax.get_xlabel()).replace("\n", " ")


def test_the_overlap_check_finds_crowded_labels():
    fig = Figure(figsize=(2, 2))
    ax = fig.add_subplot()
    ax.set_xticks(range(10), [f"a long class name {i}" for i in range(10)])
    assert overlapping_tick_labels(fig)
    ax.set_xticks(range(10), [f"a long class name {i}" for i in range(10)], rotation=90)
    assert overlapping_tick_labels(fig) == []


# -- confusion matrix ----------------------------------------------------------------------------


def test_confusion_figure_is_titled_labelled_with_a_share_colour_bar_and_readable_class_names():
    names = [f"Pour.Fromkettle {i}" if i % 2 else f"walk {i}" for i in range(14)]
    counts = RNG.integers(0, 5, (14, 14)) + 10 * np.eye(14, dtype=int)
    counts[3] = 0  # a class without videos
    fig = confusion_figure(counts, names)
    (ax,) = [a for a in fig.axes if getattr(a, "_colorbar", None) is None]
    assert ax.get_title() == "Confusion matrix (rows: true class, normalised)"
    assert ax.get_xlabel() == "predicted class" and ax.get_ylabel() == "true class (videos)"
    assert [t.get_text() for t in ax.get_xticklabels()] == names
    assert ax.get_yticklabels()[3].get_text() == f"{names[3]} (0)"
    (bar,) = colour_bars(fig)
    assert bar_label(bar) == "share of the true class's videos (0 to 1)"
    assert (bar.norm.vmin, bar.norm.vmax) == (0.0, 1.0)
    assert overlapping_tick_labels(fig) == []


# -- attention over the frames -------------------------------------------------------------------


def frames_and_maps(t: int = 3, side: int = 32, grid: int = 4):
    frames = (RNG.random((t, side, side, 3)) * 255).astype(np.uint8)
    positive = RNG.random((t, grid, grid)) ** 3
    positive /= positive.sum((1, 2), keepdims=True)
    negative = RNG.random((t, grid, grid))
    negative /= negative.sum((1, 2), keepdims=True)
    signed = RNG.normal(size=(t, grid, grid))
    signed /= np.abs(signed).sum((1, 2), keepdims=True)
    return frames, positive, negative, signed


def test_attention_grid_labels_frames_and_branches_with_one_colour_bar_per_branch():
    frames, positive, negative, _ = frames_and_maps()
    fig = attention_grid_figure(frames, {"positive": positive, "negative": negative}, "clip.mp4: layer 0")
    assert fig.get_suptitle().startswith("clip.mp4: layer 0\n")
    assert "black line on a colour bar: uniform attention (1/16 patches)" in " ".join(fig.get_suptitle().split())
    panels = [a for a in fig.axes if getattr(a, "_colorbar", None) is None]
    assert [a.get_title() for a in panels[:3]] == ["frame 0", "frame 1", "frame 2"]
    assert [a.get_ylabel() for a in panels if a.get_ylabel()] == ["input", "positive", "negative"]
    bars = colour_bars(fig)
    assert [bar_label(b) for b in bars] == [WEIGHT_UNIT, WEIGHT_UNIT]
    # Each branch's scale spans its own values over all frames, the uniform level marked on it.
    for bar, values in zip(bars, (positive, negative)):
        assert bar.norm.vmin == pytest.approx(values.min()) and bar.norm.vmax == pytest.approx(values.max())
        assert [line.get_ydata()[0] for line in bar.ax.lines] == [pytest.approx(1 / 16)]
    assert overlapping_tick_labels(fig) == []


def test_a_signed_map_is_centred_at_zero_and_labelled_signed():
    frames, positive, _, signed = frames_and_maps()
    fig = attention_grid_figure(frames, {"cog (signed)": signed, "positive": positive}, signed={"cog (signed)"})
    signed_bar, plain_bar = colour_bars(fig)
    assert bar_label(signed_bar) == SIGNED_UNIT and bar_label(plain_bar) == WEIGHT_UNIT
    bound = np.abs(signed).max()
    assert (signed_bar.norm.vmin, signed_bar.norm.vmax) == (pytest.approx(-bound), pytest.approx(bound))
    assert signed_bar.cmap.name == "RdBu_r" and len(signed_bar.ax.lines) == 0  # no "uniform" on a signed scale
    assert "signed map: red positive, blue negative, white 0" in " ".join(fig.get_suptitle().split())
    # Named signed (the kind says so), even where this map's values happen to be >= 0.
    fig = temporal_figure({"cog (signed)": np.full((4, 4), 0.25)}, signed={"cog (signed)"})
    (bar,) = colour_bars(fig)
    assert bar_label(bar) == SIGNED_UNIT and bar.norm.vmin == -bar.norm.vmax


def test_attention_grid_png_keeps_the_earlier_file_when_the_write_fails(tmp_path, monkeypatch):
    frames, positive, _, _ = frames_and_maps()
    target = tmp_path / "maps.png"
    target.write_bytes(b"earlier")

    def failing(src, dst):
        raise OSError("simulated failure")

    monkeypatch.setattr(atomic.os, "replace", failing)
    with pytest.raises(OSError, match="simulated"):
        attention_grid_png(frames, {"positive": positive}, target)
    assert target.read_bytes() == b"earlier" and os.listdir(tmp_path) == ["maps.png"]


def test_temporal_figure_labels_axes_and_thins_frame_ticks():
    t = 32
    matrix = RNG.random((t, t)) + 1
    matrix /= matrix.sum(1, keepdims=True)
    fig = temporal_figure({"positive": matrix, "negative": matrix.T / matrix.T.sum(1, keepdims=True)}, "clip: layer 3")
    assert fig.get_suptitle().startswith("clip: layer 3\n")
    panels = [a for a in fig.axes if getattr(a, "_colorbar", None) is None]
    assert [a.get_title() for a in panels] == ["positive", "negative"]
    assert {(a.get_xlabel(), a.get_ylabel()) for a in panels} == {("attended frame", "query frame")}
    assert [bar_label(b) for b in colour_bars(fig)] == [WEIGHT_UNIT, WEIGHT_UNIT]
    assert list(panels[0].get_xticks()) == list(range(0, 32, 4))  # every 4th frame: 8 labels
    assert overlapping_tick_labels(fig) == []


def test_gif_frames_have_a_title_line_and_a_name_over_each_panel(tmp_path):
    frames, positive, negative, signed = frames_and_maps(t=4, side=32)
    maps = {"positive": positive, "negative": negative, "cog (signed)": signed}
    path = attention_gif(frames, maps, tmp_path / "maps.gif", title="clip.mp4: layer 0", signed={"cog (signed)"})
    gif = Image.open(path)
    assert gif.n_frames == 4
    width, height = gif.size
    panel = 32 * 2
    assert width == 4 * panel and height > panel  # panels keep their size; strips above and below
    pictures = []
    for i in range(gif.n_frames):
        gif.seek(i)
        pictures.append(np.asarray(gif.convert("RGB")).astype(int))
    made = attention_gif_frames(frames, maps, "clip.mp4: layer 0", signed={"cog (signed)"})
    top = (height - panel) // 2  # title line and name line
    first = np.asarray(made[0]).astype(int)
    # The panels sit below the strip, as they are: the frame itself in the first panel.
    np.testing.assert_array_equal(first[top: top + panel, :panel], np.repeat(np.repeat(frames[0], 2, 0), 2, 1))
    names = first[top // 2: top, :]
    for p in range(4):  # every panel has its name: dark text pixels on the white strip
        assert (names[:, p * panel: (p + 1) * panel].min(axis=-1) < 100).sum() > 10
    strips = [names[:, p * panel: (p + 1) * panel] for p in range(4)]
    assert all(not np.array_equal(a, b) for a, b in combinations(strips, 2))  # different names
    # The title line says which frame: it differs between frames (read back from the GIF).
    assert not np.array_equal(pictures[0][: top // 2], pictures[1][: top // 2])
    assert (pictures[0][: top // 2].min(axis=-1) < 100).sum() > 10


# -- subspaces -----------------------------------------------------------------------------------


def test_subspace_figure_labels_both_heat_maps_the_degrees_and_the_alpha_legend():
    layers, heads = 24, 16
    records = [dict(pair="v", kind=kind, layer=layer, head=head, mean_deg=float(RNG.uniform(0, 90)),
                    alpha=float(RNG.normal())) for kind in ("spatial", "temporal")
               for layer in range(layers) for head in range(heads)]
    fig = subspace_figure(records, "dna.ckpt: V+ / V- subspaces")
    assert fig.get_suptitle().startswith("dna.ckpt: V+ / V- subspaces\n")
    panels = [a for a in fig.axes if getattr(a, "_colorbar", None) is None]
    assert [a.get_title() for a in panels] == ["spatial attention", "temporal attention", "alpha per layer"]
    assert [(a.get_xlabel(), a.get_ylabel()) for a in panels[:2]] == [("head", "layer")] * 2
    assert panels[2].get_xlabel() == "layer" and panels[2].get_ylabel().startswith("alpha")
    (bar,) = colour_bars(fig)
    assert bar_label(bar) == "mean principal angle V+ / V- (degrees)" and (bar.norm.vmin, bar.norm.vmax) == (0, 90)
    legend = panels[2].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "spatial: mean over heads", "temporal: mean over heads", "band: range over heads"]
    assert overlapping_tick_labels(fig) == []


# -- the registry says which maps are signed; names and rollout follow ---------------------------


def test_the_registry_marks_cog_maps_signed_and_their_name_is_never_softmax():
    cog, softmax, dna = attention_kind("cog"), attention_kind("softmax"), attention_kind("dna")
    assert cog.signed_maps == ("attn",) and softmax.signed_maps == () and dna.signed_maps == ()
    assert attention_maps.branch_name("attn", cog) == "cog (signed)"
    assert attention_maps.branch_name("attn", softmax) == "softmax"
    assert attention_maps.branch_name("negative", dna) == "negative"
    assert attention_maps.signed_names(cog, softmax, None) == {"cog (signed)"}


def tiny_cog_net(depth: int = 3) -> TimeSformer:
    torch.manual_seed(0)
    return TimeSformer(num_classes=3, img_size=16, num_frames=2, patch_size=8, embed_dim=16, depth=depth,
                       num_heads=2, attention="cog", drop_path_rate=0.0).eval()


def test_a_cog_models_middle_block_map_is_named_cog_and_holds_negative_weights():
    net = tiny_cog_net()
    video = torch.randn(1, 3, 2, 16, 16)
    _, captured = attention_maps.capture_maps(net, video)
    kind = kind_of(net.attention_modules()["blocks.1.attn"])
    spatial = attention_maps.cls_maps(captured["blocks.1.attn"], 2, (2, 2), kind=kind)
    assert list(spatial) == ["cog (signed)"]
    assert bool((captured["blocks.1.attn"]["attn"] < 0).any())  # what the name warns of


def test_rollout_refuses_signed_maps_naming_the_kind():
    net = tiny_cog_net()
    _, captured = attention_maps.capture_maps(net, torch.randn(1, 3, 2, 16, 16))
    refusal = r"blocks\.0\.temporal_attn is of attention kind 'cog', whose weights are signed"
    with pytest.raises(ValueError, match=refusal) as err:
        attention_maps.rollout(net, captured, 2, (2, 2))
    assert "\n" not in str(err.value)
    # Without a kind to ask (maps alone), negative weights are refused all the same.
    from types import SimpleNamespace

    maps = {name: {"attn": m["attn"]} for name, m in captured.items()}
    with pytest.raises(ValueError, match="negative weights"):
        attention_maps.rollout(SimpleNamespace(blocks=[None, None, None]), maps, 2, (2, 2))


def test_the_rollout_help_says_signed_maps_are_refused():
    from dna_video.tools.analyze import ROLLOUT_HELP

    assert "refused for a kind with signed weights" in ROLLOUT_HELP and "cog" in ROLLOUT_HELP


# -- the denoising experiment's figure ----------------------------------------------------------


def _denoising_rows():
    """Three primary pairs (softmax 50/60/70%, DnA 2, 4, 6 points above) and nothing else."""
    rows = []
    for seed, base in enumerate((0.5, 0.6, 0.7)):
        for variant, init, gain in (("softmax", "-", 0.0), ("dna", "random", 0.02 * (seed + 1))):
            rows.append({"group": "primary", "variant": variant, "dna_init": init, "seed": str(seed),
                         "task": "target", "shifted_top1": str(base + gain), "in_distribution_top1": "0.9"})
    return rows


def test_denoising_differences_figure_shows_each_comparison_with_its_interval(tmp_path):
    from experiments.denoising import design, report

    plan = design.load_plan()
    # A preregistered comparison is drawn only with all its planned pairs: 3 of the plan's 20, none.
    assert report.differences_figure(_denoising_rows(), plan).axes[0].get_yticklabels() == []
    plan = dict(plan, primary=dict(plan["primary"], pairs=3))  # here the three pairs are all of them
    fig = report.differences_figure(_denoising_rows(), plan)
    (ax,) = fig.axes
    assert ax.get_title() == "Denoising experiment: paired differences"
    assert ax.get_xlabel().startswith("paired difference a - b (percentage points)")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["PRIMARY: fine-tuned: DnA (random) - softmax\n(shifted top-1, 3 pairs)"]
    # The dot sits at the mean difference: 4 points.
    (line,) = [c for c in ax.lines if c.get_marker() == "o"]
    assert line.get_xdata()[0] == pytest.approx(4.0)
    assert overlapping_tick_labels(fig) == []
    (written,) = report.plots(_denoising_rows(), plan, tmp_path)
    assert written.read_bytes()[:4] == b"\x89PNG" and os.listdir(tmp_path) == ["denoising_differences.png"]
