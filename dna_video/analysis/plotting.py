"""Figures of the analyses, drawn with matplotlib's object API on the Agg canvas (no pyplot:
no global state, no display needed) and written as PNG or, for frame sequences, GIF.

Each picture is built by a function that returns it (``*_figure``: a matplotlib Figure;
:func:`attention_gif_frames`: Pillow images) and written by one that saves it atomically
(:func:`~dna_video.common.atomic.atomic_path`: a failed write leaves an earlier file as it
was). Every picture has a title, labelled panels and axes, and a colour bar with the unit of
its colours; a signed map (an attention kind whose registry entry lists it, e.g. cog's
sign(p) softmax(|p|)) is drawn on a diverging scale centred at 0.

* :func:`confusion_png`: confusion matrix, rows normalised by the true class, class names on
  both axes;
* :func:`overlay`, :func:`attention_grid_png`, :func:`attention_gif`: attention maps over
  the sampled frames, one row (GIF: one panel) per branch;
* :func:`temporal_png`: frame-to-frame attention heat maps;
* :func:`subspace_png`: layers x heads heat maps of the mean V+ / V- principal angle
  (spatial and temporal side by side) and alpha per layer;
* :func:`timeline_figure`: a long video's class probabilities over time and its segments.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib
import numpy as np
from matplotlib.axis import Axis
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties, findfont
from matplotlib.patches import Patch
from PIL import Image, ImageDraw, ImageFont

from dna_video.common.atomic import atomic_path

__all__ = [
    "WEIGHT_UNIT", "SIGNED_UNIT", "confusion_figure", "confusion_png", "overlay", "attention_grid_figure",
    "attention_grid_png", "attention_gif_frames", "attention_gif", "temporal_figure", "temporal_png",
    "subspace_figure", "subspace_png", "save_figure", "PROBABILITY_UNIT", "timeline_figure",
]

#: Colour bar labels: attention weights that are probabilities, and signed ones.
WEIGHT_UNIT = "attention weight (probability)"
SIGNED_UNIT = "signed attention weight"
#: At most this many labelled ticks along an index axis (layers, heads, frames).
MAX_INDEX_TICKS = 16


def save_figure(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix), atomically; the figure is released."""
    path = Path(path)
    try:
        with atomic_path(path) as partial:
            fig.savefig(partial, dpi=dpi, bbox_inches="tight")
    finally:
        fig.clear()
    return path


class _Scale(NamedTuple):
    """One map's colours: colour map, range and the colour bar's label."""

    cmap: str
    vmin: float
    vmax: float
    label: str
    signed: bool


def _scale(values: np.ndarray, signed: bool, cmap: str) -> _Scale:
    """The colour scale of ``values``: from their smallest to their largest value, or, for a
    signed map (``signed``, or any value below 0), a diverging scale centred at 0."""
    values = np.asarray(values, dtype=np.float64)
    if signed or values.min() < 0:
        bound = float(np.abs(values).max()) or 1.0
        return _Scale("RdBu_r", -bound, bound, SIGNED_UNIT, True)
    low, high = float(values.min()), float(values.max())
    if high - low < 1e-12:  # a constant map: a range around it, its colour in the middle
        pad = max(abs(low) * 0.05, 1e-6)
        low, high = low - pad, high + pad
    return _Scale(cmap, low, high, WEIGHT_UNIT, False)


def _index_ticks(axis: Axis, count: int, most: int = MAX_INDEX_TICKS) -> None:
    """Integer ticks 0..count-1 on ``axis``, every one up to ``most``, else every k-th (so
    that labels never crowd)."""
    step = max(1, math.ceil(count / most))
    axis.set_ticks(range(0, count, step))


def _suptitle(fig: Figure, title: str, default: str, caption: str = "") -> None:
    """``title`` (or ``default``) over the figure, with ``caption`` under it wrapped to the
    figure's width."""
    text = title or default
    if caption:
        text += "\n" + textwrap.fill(caption, width=max(40, int(fig.get_figwidth() * 12)))
    fig.suptitle(text, fontsize=10)


def _scale_caption(scales: Sequence[_Scale], uniform: str) -> str:
    """What the colour bars mark: ``uniform`` where a probability map's bar has the line,
    and the colours of a signed map."""
    parts = []
    if any(not s.signed for s in scales):
        parts.append(uniform)
    if any(s.signed for s in scales):
        parts.append("signed map: red positive, blue negative, white 0")
    return "; ".join(parts)


# -- confusion matrix ----------------------------------------------------------------------------


def confusion_figure(counts: Sequence[Sequence[int]] | np.ndarray, class_names: Sequence[str],
                     title: str = "Confusion matrix (rows: true class, normalised)") -> Figure:
    """The confusion matrix ``counts`` (row = true class) as a heat map of each row's share;
    cells hold the share (with few classes) and rows without videos stay empty."""
    counts = np.asarray(counts, dtype=np.float64)
    k = counts.shape[0]
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.full_like(counts, np.nan), where=totals > 0)
    side = max(4.0, 0.2 * k + 2.5)
    fig = Figure(figsize=(side + 1.2, side), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label("share of the true class's videos (0 to 1)", fontsize=8)
    # Upright labels would overlap once names are longer than a cell: vertical ones never do.
    ax.set_xticks(range(k), [str(n) for n in class_names], rotation=90, fontsize=8)
    ax.set_yticks(range(k), [f"{n} ({int(t)})" for n, t in zip(class_names, totals[:, 0])], fontsize=8)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class (videos)")
    ax.set_title(title, fontsize=10)
    if k <= 20:
        for i in range(k):
            for j in range(k):
                if np.isfinite(shares[i, j]) and counts[i, j] > 0:
                    ax.text(j, i, f"{shares[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if shares[i, j] > 0.5 else "black")
    return fig


def confusion_png(counts: Sequence[Sequence[int]] | np.ndarray, class_names: Sequence[str], path: str | Path,
                  title: str = "Confusion matrix (rows: true class, normalised)") -> Path:
    """:func:`confusion_figure` written to ``path``."""
    return save_figure(confusion_figure(counts, class_names, title), path)


# -- attention over the frames -------------------------------------------------------------------


def overlay(frame: np.ndarray, attention: np.ndarray, strength: float = 0.55,
            cmap: str = "jet", vmin: float | None = None, vmax: float | None = None) -> np.ndarray:
    """``frame`` (H, W, 3) uint8 with the patch-grid map ``attention`` (h, w) upsampled
    (bilinear) to the frame, scaled to [0, 1] from [vmin, vmax] (default: the map's own min
    and max), coloured and blended. ``attention``: a numpy array or a tensor."""
    import torch  # here, not at the top: the timeline figure of the ONNX runtime draws without torch
    import torch.nn.functional as F

    att = torch.as_tensor(np.asarray(attention), dtype=torch.float32)[None, None]
    att = F.interpolate(att, size=frame.shape[:2], mode="bilinear", align_corners=False)[0, 0].numpy()
    low = float(att.min()) if vmin is None else vmin
    span = (float(att.max()) if vmax is None else vmax) - low
    att = np.clip((att - low) / span, 0, 1) if span > 0 else np.zeros_like(att)
    colour = matplotlib.colormaps[cmap](att)[..., :3] * 255.0
    return np.clip((1 - strength) * frame.astype(np.float64) + strength * colour, 0, 255).astype(np.uint8)


def _branch_scales(maps: Mapping[str, np.ndarray], signed: Collection[str]) -> dict[str, _Scale]:
    """One colour scale per branch over all its frames (so changes over time show)."""
    return {name: _scale(m, name in signed, "jet") for name, m in maps.items()}


def attention_grid_figure(frames: np.ndarray, maps: Mapping[str, np.ndarray], title: str = "",
                          frame_labels: Sequence[str] | None = None, signed: Collection[str] = ()) -> Figure:
    """Grid of the sampled ``frames`` (T, H, W, 3) uint8: the first row the frames as they
    are, then one row per branch of ``maps`` (name -> (T, h, w)) overlaid on them, each row
    with its colour bar. A branch has one colour scale over all its frames (so changes over
    time show), from its smallest to its largest value, with the uniform map (1 / patches)
    marked on the colour bar, since a nearly uniform map stretched to the full scale looks
    peaked; a branch named in ``signed`` (or with negative values) is centred at 0."""
    t = frames.shape[0]
    maps = {name: np.asarray(m, dtype=np.float64) for name, m in maps.items()}
    scales = _branch_scales(maps, signed)
    rows = 1 + len(maps)
    fig = Figure(figsize=(1.6 * t + 1.3, 1.75 * rows + 0.6), layout="constrained")
    grid = fig.add_gridspec(rows, t + 1, width_ratios=[1.0] * t + [0.07])
    for col in range(t):
        ax = fig.add_subplot(grid[0, col])
        ax.imshow(frames[col])
        ax.set_title(frame_labels[col] if frame_labels else f"frame {col}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        if col == 0:
            ax.set_ylabel("input", fontsize=8)
    patches = next(iter(maps.values()))[0].size if maps else 0
    for row, (name, branch) in enumerate(maps.items(), start=1):
        scale = scales[name]
        for col in range(t):
            ax = fig.add_subplot(grid[row, col])
            ax.imshow(overlay(frames[col], branch[col], cmap=scale.cmap, vmin=scale.vmin, vmax=scale.vmax))
            ax.set_xticks([])
            ax.set_yticks([])
            if col == 0:
                ax.set_ylabel(name, fontsize=8)
        cax = fig.add_subplot(grid[row, t])
        bar = fig.colorbar(ScalarMappable(Normalize(scale.vmin, scale.vmax), scale.cmap), cax=cax)
        bar.set_label(scale.label.replace(" (", "\n("), fontsize=7)
        bar.ax.tick_params(labelsize=6)
        if not scale.signed and scale.vmin <= 1.0 / patches <= scale.vmax:
            bar.ax.axhline(1.0 / patches, color="black", lw=1.5)
    caption = "; ".join(filter(None, [
        "rows: input, then each branch's map over the frames (one colour scale per branch, all frames)",
        _scale_caption(list(scales.values()), f"black line on a colour bar: uniform attention (1/{patches} patches)"),
    ]))
    _suptitle(fig, title, "Attention of the cls token over each frame's patches", caption)
    return fig


def attention_grid_png(frames: np.ndarray, maps: Mapping[str, np.ndarray], path: str | Path,
                       title: str = "", frame_labels: Sequence[str] | None = None,
                       signed: Collection[str] = ()) -> Path:
    """:func:`attention_grid_figure` written to ``path``."""
    return save_figure(attention_grid_figure(frames, maps, title, frame_labels, signed), path)


def fit_text(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.FreeTypeFont, width: float) -> str:
    """``text``, cut with ``...`` to fit ``width`` pixels (figures' and annotated frames' labels)."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."


def _font(size: int) -> ImageFont.FreeTypeFont:
    """matplotlib's own DejaVu Sans (shipped with it: the same on every machine)."""
    return ImageFont.truetype(findfont(FontProperties(family="DejaVu Sans")), size)


def attention_gif_frames(frames: np.ndarray, maps: Mapping[str, np.ndarray], title: str = "", scale: int = 2,
                         signed: Collection[str] = ()) -> list[Image.Image]:
    """The GIF's pictures, one per sampled frame: a title line (with the frame's number), a
    name above each panel (input, then ``maps`` in order), the panels enlarged ``scale``
    times, and under each branch's panel its colour scale (one per branch over all frames;
    signed: centred at 0) with its ends' values."""
    maps = {name: np.asarray(m, dtype=np.float64) for name, m in maps.items()}
    scales = _branch_scales(maps, signed)
    height, width = frames.shape[1] * scale, frames.shape[2] * scale
    size = int(np.clip(width // 11, 9, 14))
    font = _font(size)
    line = size + 6
    names = ["input", *maps]
    canvas_width = width * len(names)
    top, bottom = 2 * line, 2 * line
    ramps = {name: (matplotlib.colormaps[s.cmap](np.linspace(0, 1, max(width - 8, 2)))[:, :3] * 255).astype(np.uint8)
             for name, s in scales.items()}
    pictures = []
    for i in range(frames.shape[0]):
        panels = [frames[i]] + [overlay(frames[i], m[i], cmap=s.cmap, vmin=s.vmin, vmax=s.vmax)
                                for m, s in zip(maps.values(), scales.values())]
        row = Image.fromarray(np.concatenate(panels, axis=1))
        picture = Image.new("RGB", (canvas_width, top + height + bottom), "white")
        picture.paste(row.resize((canvas_width, height), Image.NEAREST), (0, top))
        draw = ImageDraw.Draw(picture)
        heading = f"{title or 'Attention'} | frame {i + 1}/{frames.shape[0]}"
        draw.text((4, 2), fit_text(draw, heading, font, canvas_width - 8), fill="black", font=font)
        for p, name in enumerate(names):
            label = fit_text(draw, name, font, width - 6)
            draw.text((p * width + (width - draw.textlength(label, font=font)) / 2, line + 2), label,
                      fill="black", font=font)
        y = top + height + 3
        draw.text((4, y - 3), fit_text(draw, "colour scale", font, width - 8), fill="black", font=font)
        draw.text((4, y + line // 2), fit_text(draw, "(min, max)", font, width - 8), fill="black", font=font)
        for p, name in enumerate(maps, start=1):
            s = scales[name]
            strip = np.repeat(ramps[name][None], max(line // 2, 3), axis=0)
            picture.paste(Image.fromarray(strip), (p * width + 4, y))
            low, high = f"{s.vmin:.2g}", f"{s.vmax:.2g}"
            small = font  # the ends' values in a smaller size where both do not fit side by side
            while small.size > 6 and draw.textlength(f"{low}  {high}", font=small) > width - 8:
                small = _font(small.size - 1)
            draw.text((p * width + 4, y + line // 2), low, fill="black", font=small)
            draw.text((p * width + width - 4 - draw.textlength(high, font=small), y + line // 2), high,
                      fill="black", font=small)
        pictures.append(picture)
    return pictures


def attention_gif(frames: np.ndarray, maps: Mapping[str, np.ndarray], path: str | Path,
                  frame_ms: int = 400, scale: int = 2, title: str = "", signed: Collection[str] = ()) -> Path:
    """Animated GIF of :func:`attention_gif_frames` (``frame_ms`` per frame, looping), written
    to ``path`` atomically."""
    pictures = attention_gif_frames(frames, maps, title, scale, signed)
    path = Path(path)
    with atomic_path(path) as partial:
        pictures[0].save(partial, save_all=True, append_images=pictures[1:], duration=frame_ms, loop=0)
    return path


def temporal_figure(maps: Mapping[str, np.ndarray], title: str = "", signed: Collection[str] = ()) -> Figure:
    """One heat map per branch of frame-to-frame attention (T, T): row = query frame, column =
    attended frame, each row summing to 1 (uniform: 1 / T, marked on the colour bar). Each map
    has its own colour scale, from its smallest to its largest value, so small departures
    from uniform show; a branch named in ``signed`` (or with negative values) is centred at 0."""
    fig = Figure(figsize=(3.8 * len(maps) + 0.6, 3.6), layout="constrained")
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    scales = []
    for ax, (name, matrix) in zip(axes, maps.items()):
        matrix = np.asarray(matrix, dtype=np.float64)
        frames = matrix.shape[-1]
        scale = _scale(matrix, name in signed, "viridis")
        scales.append(scale)
        image = ax.imshow(matrix, cmap=scale.cmap, vmin=scale.vmin, vmax=scale.vmax)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("attended frame")
        ax.set_ylabel("query frame")
        _index_ticks(ax.xaxis, matrix.shape[1], most=8)  # a panel is ~3 inches wide
        _index_ticks(ax.yaxis, matrix.shape[0], most=8)
        bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        bar.set_label(scale.label, fontsize=8)
        if not scale.signed and scale.vmin <= 1.0 / frames <= scale.vmax:
            bar.ax.axhline(1.0 / frames, color="white", lw=1.5)
    caption = "; ".join(filter(None, [
        "row: query frame, column: attended frame (each row of a probability map sums to 1)",
        _scale_caption(scales, f"white line on a colour bar: uniform (1/{frames})"),
    ]))
    _suptitle(fig, title, "Temporal attention between frames", caption)
    return fig


def temporal_png(maps: Mapping[str, np.ndarray], path: str | Path, title: str = "",
                 signed: Collection[str] = ()) -> Path:
    """:func:`temporal_figure` written to ``path``."""
    return save_figure(temporal_figure(maps, title, signed), path)


# -- subspaces -----------------------------------------------------------------------------------


def subspace_figure(records: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """Layers x heads heat maps of the mean principal angle between V+ and V- (spatial and
    temporal side by side, one colour bar in degrees) and alpha per layer (mean over heads,
    range as a band), from the records of :func:`dna_video.analysis.subspaces.subspace_records`."""
    v = [r for r in records if r["pair"] == "v"]
    if not v:
        raise ValueError("no V+/V- records to plot (no DnA attention in the checkpoint)")
    layers = 1 + max(r["layer"] for r in v)
    heads = 1 + max(r["head"] for r in v)
    angle = {kind: np.full((layers, heads), np.nan) for kind in ("spatial", "temporal")}
    alpha = {kind: np.full((layers, heads), np.nan) for kind in ("spatial", "temporal")}
    for r in v:
        angle[r["kind"]][r["layer"], r["head"]] = r["mean_deg"]
        alpha[r["kind"]][r["layer"], r["head"]] = r["alpha"]
    fig = Figure(figsize=(4.0 + 1.0 * heads + 3.5, 0.35 * layers + 2.8), layout="constrained")
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1.4]})
    for ax, kind in zip(axes[:2], ("spatial", "temporal")):
        image = ax.imshow(angle[kind], cmap="magma", vmin=0.0, vmax=90.0, aspect="auto")
        ax.set_title(f"{kind} attention", fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        _index_ticks(ax.xaxis, heads)
        _index_ticks(ax.yaxis, layers)
        for i in range(layers):
            for j in range(heads):
                if np.isfinite(angle[kind][i, j]) and heads * layers <= 64:
                    ax.text(j, i, f"{angle[kind][i, j]:.0f}", ha="center", va="center", fontsize=7,
                            color="white" if angle[kind][i, j] < 60 else "black")
    bar = fig.colorbar(image, ax=list(axes[:2]), fraction=0.05, pad=0.02)
    bar.set_label("mean principal angle V+ / V- (degrees)", fontsize=8)
    ax = axes[2]
    handles = []
    for kind, colour in (("spatial", "tab:blue"), ("temporal", "tab:orange")):
        values = alpha[kind]
        (line,) = ax.plot(range(layers), np.nanmean(values, axis=1), marker="o", color=colour,
                          label=f"{kind}: mean over heads")
        ax.fill_between(range(layers), np.nanmin(values, axis=1), np.nanmax(values, axis=1), color=colour, alpha=0.2)
        handles.append(line)
    handles.append(Patch(color="grey", alpha=0.3, label="band: range over heads"))
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.set_xlabel("layer")
    ax.set_ylabel("alpha (weight of the negative branch)")
    _index_ticks(ax.xaxis, layers)
    ax.legend(handles=handles, fontsize=8)
    ax.set_title("alpha per layer", fontsize=9)
    _suptitle(fig, title, "V+ / V- subspaces of DnA attention",
              "left: mean principal angle between V+ and V- per layer and head (90: orthogonal); right: alpha")
    return fig


def subspace_png(records: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path:
    """:func:`subspace_figure` written to ``path``."""
    return save_figure(subspace_figure(records, title), path)


# -- a long video's timeline ---------------------------------------------------------------------

#: Colour bar label of the timeline.
PROBABILITY_UNIT = "class probability (0 to 1)"


def timeline_figure(start_s: Sequence[float], end_s: Sequence[float], probs: np.ndarray,
                    class_names: Sequence[str], segments: Sequence[tuple[float, float, int, float]],
                    title: str = "") -> Figure:
    """A video's class probabilities over time and its segments, one row per class (names on
    both panels' y axes).

    Top: the (W, K) ``probs`` of windows ``start_s``..``end_s`` as a heat strip, each window
    drawn from halfway to its predecessor's centre to halfway to its successor's. Bottom: the
    ``segments`` (start, end, class, mean probability) as bars on their class's row, coloured by
    their probability on the same scale (one colour bar)."""
    probs = np.asarray(probs, dtype=np.float64)
    k = len(class_names)
    start, end = np.asarray(start_s, dtype=np.float64), np.asarray(end_s, dtype=np.float64)
    centres = (start + end) / 2
    edges = np.concatenate([[start[0]], (centres[:-1] + centres[1:]) / 2, [end[-1]]]) if len(start) else np.zeros(2)
    rows = 0.22 * k + 0.9
    fig = Figure(figsize=(10.0, 2 * rows + 1.2), layout="constrained")
    heat, bars = fig.subplots(2, 1, sharex=True)
    norm = Normalize(0.0, 1.0)
    cmap = matplotlib.colormaps["viridis"]
    if len(start):
        image = heat.pcolormesh(edges, np.arange(k + 1) - 0.5, probs.T, cmap=cmap, norm=norm)
    else:
        image = ScalarMappable(norm, cmap)
    heat.set_title("class probability per window", fontsize=9)
    for lo, hi, label, prob in segments:
        bars.broken_barh([(lo, hi - lo)], (label - 0.4, 0.8), facecolors=cmap(norm(prob)), edgecolor="black",
                         linewidth=0.5)
    bars.set_title("segments: consecutive windows of one top-1 class (colour: its mean probability)", fontsize=9)
    size = 8 if k <= 40 else 6
    for ax in (heat, bars):
        ax.set_yticks(range(k), [str(n) for n in class_names], fontsize=size)
        ax.set_ylim(k - 0.5, -0.5)  # the first class on top
        ax.set_ylabel("class")
        ax.set_xlabel("time (s)")
        ax.tick_params(labelbottom=True)  # times under both panels
    bars.set_xlim(edges[0], edges[-1])
    bar = fig.colorbar(image, ax=[heat, bars], fraction=0.04, pad=0.02)
    bar.set_label(PROBABILITY_UNIT, fontsize=8)
    _suptitle(fig, title, "Timeline")
    return fig
