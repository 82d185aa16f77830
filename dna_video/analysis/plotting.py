"""Figures of the analyses, drawn with matplotlib's object API on the Agg canvas (no pyplot:
no global state, no display needed) and written as PNG or, for frame sequences, GIF.

* :func:`confusion_png`: confusion matrix, rows normalised by the true class, class names on
  both axes;
* :func:`overlay`, :func:`attention_grid_png`, :func:`attention_gif`: attention maps over
  the sampled frames, one row (GIF: one panel) per branch;
* :func:`temporal_png`: frame-to-frame attention heat maps;
* :func:`subspace_png`: layers x heads heat maps of the mean V+ / V- principal angle
  (spatial and temporal side by side) and alpha per layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from PIL import Image

__all__ = ["confusion_png", "overlay", "attention_grid_png", "attention_gif", "temporal_png", "subspace_png"]


def _save(fig: Figure, path: str | Path, dpi: int = 100) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def confusion_png(counts: Sequence[Sequence[int]] | np.ndarray, class_names: Sequence[str], path: str | Path,
                  title: str = "Confusion matrix (rows: true class, normalised)") -> Path:
    """The confusion matrix ``counts`` (row = true class) as a heat map of each row's share;
    cells hold the share (with few classes) and rows without videos stay empty."""
    counts = np.asarray(counts, dtype=np.float64)
    k = counts.shape[0]
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.full_like(counts, np.nan), where=totals > 0)
    side = max(4.0, 0.45 * k + 2.5)
    fig = Figure(figsize=(side + 1.0, side))
    ax = fig.add_subplot()
    image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(k), [str(n) for n in class_names], rotation=60, ha="right", fontsize=8)
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
    return _save(fig, path)


def overlay(frame: np.ndarray, attention: np.ndarray | torch.Tensor, strength: float = 0.55,
            cmap: str = "jet", vmin: float | None = None, vmax: float | None = None) -> np.ndarray:
    """``frame`` (H, W, 3) uint8 with the patch-grid map ``attention`` (h, w) upsampled
    (bilinear) to the frame, scaled to [0, 1] from [vmin, vmax] (default: the map's own min
    and max), coloured and blended."""
    att = torch.as_tensor(np.asarray(attention), dtype=torch.float32)[None, None]
    att = F.interpolate(att, size=frame.shape[:2], mode="bilinear", align_corners=False)[0, 0].numpy()
    low = float(att.min()) if vmin is None else vmin
    span = (float(att.max()) if vmax is None else vmax) - low
    att = np.clip((att - low) / span, 0, 1) if span > 0 else np.zeros_like(att)
    colour = matplotlib.colormaps[cmap](att)[..., :3] * 255.0
    return np.clip((1 - strength) * frame.astype(np.float64) + strength * colour, 0, 255).astype(np.uint8)


def attention_grid_png(frames: np.ndarray, maps: Mapping[str, np.ndarray], path: str | Path,
                       title: str = "", frame_labels: Sequence[str] | None = None) -> Path:
    """Grid of the sampled ``frames`` (T, H, W, 3) uint8: the first row the frames as they
    are, then one row per branch of ``maps`` (name -> (T, h, w)) overlaid on them. Each
    branch has one colour scale over all its frames (so changes over time show), from its
    smallest to its largest value; the row label gives that range against the uniform map
    (1 / patches), since a nearly uniform map stretched to the full scale looks peaked."""
    t = frames.shape[0]
    rows = 1 + len(maps)
    fig = Figure(figsize=(1.6 * t, 1.75 * rows))
    axes = fig.subplots(rows, t, squeeze=False)
    labels = ["input"]
    for name, branch in maps.items():
        branch = np.asarray(branch)
        uniform = 1.0 / branch[0].size
        labels.append(f"{name}\n{branch.min() / uniform:.2g}-{branch.max() / uniform:.2g} x uniform")
    for col in range(t):
        axes[0, col].imshow(frames[col])
        axes[0, col].set_title(frame_labels[col] if frame_labels else f"frame {col}", fontsize=8)
        for row, branch in enumerate(maps.values(), start=1):
            branch = np.asarray(branch)
            axes[row, col].imshow(overlay(frames[col], branch[col], vmin=float(branch.min()), vmax=float(branch.max())))
        for row in range(rows):
            axes[row, col].set_xticks([])
            axes[row, col].set_yticks([])
    for row, label in enumerate(labels):
        axes[row, 0].set_ylabel(label, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def attention_gif(frames: np.ndarray, maps: Mapping[str, np.ndarray], path: str | Path,
                  frame_ms: int = 400, scale: int = 2) -> Path:
    """Animated GIF: per sampled frame, the frame and each branch's overlay side by side
    (order: input, then ``maps`` in order; one colour scale per branch over all frames), each
    panel enlarged ``scale`` times."""
    maps = {name: np.asarray(m) for name, m in maps.items()}
    panels = []
    for i in range(frames.shape[0]):
        row = np.concatenate(
            [frames[i], *(overlay(frames[i], m[i], vmin=float(m.min()), vmax=float(m.max())) for m in maps.values())],
            axis=1,
        )
        image = Image.fromarray(row)
        panels.append(image.resize((image.width * scale, image.height * scale), Image.NEAREST))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    panels[0].save(path, save_all=True, append_images=panels[1:], duration=frame_ms, loop=0)
    return path


def temporal_png(maps: Mapping[str, np.ndarray], path: str | Path, title: str = "") -> Path:
    """One heat map per branch of frame-to-frame attention (T, T): row = query frame, column =
    attended frame, each row summing to 1 (uniform: 1 / T). Each map has its own colour scale,
    from its smallest to its largest value, so small departures from uniform show."""
    fig = Figure(figsize=(3.6 * len(maps) + 0.6, 3.3), layout="constrained")
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    for ax, (name, matrix) in zip(axes, maps.items()):
        image = ax.imshow(matrix, cmap="viridis")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("attended frame")
        ax.set_ylabel("query frame")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def subspace_png(records: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path:
    """Layers x heads heat maps of the mean principal angle between V+ and V- (spatial and
    temporal side by side) and alpha per layer (mean over heads, range as a band), from the
    records of :func:`dna_video.analysis.subspaces.subspace_records`."""
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
    fig = Figure(figsize=(4.0 + 1.0 * heads + 3.5, 0.35 * layers + 2.6), layout="constrained")
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1.4]})
    for ax, kind in zip(axes[:2], ("spatial", "temporal")):
        image = ax.imshow(angle[kind], cmap="magma", vmin=0.0, vmax=90.0, aspect="auto")
        ax.set_title(f"{kind}\nmean angle V+ / V- (degrees)", fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(heads))
        ax.set_yticks(range(layers))
        for i in range(layers):
            for j in range(heads):
                if np.isfinite(angle[kind][i, j]) and heads * layers <= 64:
                    ax.text(j, i, f"{angle[kind][i, j]:.0f}", ha="center", va="center", fontsize=7,
                            color="white" if angle[kind][i, j] < 60 else "black")
    fig.colorbar(image, ax=axes[1], fraction=0.08, pad=0.04)
    ax = axes[2]
    for kind, colour in (("spatial", "tab:blue"), ("temporal", "tab:orange")):
        values = alpha[kind]
        ax.plot(range(layers), np.nanmean(values, axis=1), marker="o", color=colour, label=kind)
        ax.fill_between(range(layers), np.nanmin(values, axis=1), np.nanmax(values, axis=1), color=colour, alpha=0.2)
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.set_xlabel("layer")
    ax.set_ylabel("alpha (mean, range over heads)")
    ax.set_xticks(range(layers))
    ax.legend(fontsize=8)
    ax.set_title("alpha per layer", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)
