"""``dna-video analyze``: study a trained model from its checkpoint alone.

* ``maps CKPT VIDEO --out DIR``: for one layer (default: the last), the cls token's spatial
  attention over each sampled frame for every branch (DnA: positive and negative; softmax:
  the one map; a kind with signed weights such as cog: its map, named ``cog (signed)`` and
  drawn centred at 0), overlaid on the frames as a PNG grid (rows: input, branches; columns:
  frames; a colour bar per branch) and an animated GIF (panels named); the temporal attention
  between frames as heat maps; the maps as tensors (``.pt``). ``--rollout`` adds attention
  rollout through all blocks (softmax or DnA's positive branch only; refused for signed maps).
* ``subspaces CKPT [--reference CKPT] --out DIR``: per DnA module and head, principal angles
  and normalised Frobenius inner products between V+ and V- (and Q+ and Q-), alpha; with a
  reference checkpoint, intruder dimensions and the change of each figure. JSON records and a
  layers x heads heat map.

The video for ``maps`` is sampled as the checkpoint's evaluation was (one clip, centre crop);
``--num-frames``, ``--crop-size``... override that.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import torch

from dna_video.common.atomic import atomic_path, write_json
from dna_video.analysis import maps as attention_maps
from dna_video.analysis.plotting import attention_gif, attention_grid_png, subspace_png, temporal_png
from dna_video.analysis.subspaces import compare_records, intruder_records, subspace_records
from dna_video.data.video import VideoDecodeError
from dna_video.models.attention import kind_of
from dna_video.prediction.torch_backend import device_of, load_model
from dna_video.prediction.views import read_views
from dna_video.tasks.views import mean_view_probs
from dna_video.tools.predict import add_settings_arguments, settings_overrides

log = logging.getLogger(__name__)

__all__ = ["run_maps", "run_subspaces", "main"]

ROLLOUT_HELP = (
    "also write attention rollout through every block (softmax attention, or DnA's POSITIVE branch only: "
    "rollout multiplies row-stochastic maps, and a DnA head's output is a signed sum of two maps weighted by "
    "an unconstrained alpha, which no single attention map describes; refused for a kind with signed weights, "
    "such as cog's sign(p) softmax(|p|))"
)


def _display_frames(views: torch.Tensor, mean, std) -> np.ndarray:
    """(C, T, H, W) normalised -> (T, H, W, 3) uint8 as the model saw it."""
    mean_t = torch.tensor(mean).view(-1, 1, 1, 1)
    std_t = torch.tensor(std).view(-1, 1, 1, 1)
    frames = (views * std_t + mean_t).clamp(0, 1) * 255
    return frames.permute(1, 2, 3, 0).round().to(torch.uint8).numpy()


def run_maps(checkpoint: str, video: str, out: str, layer: int = -1, head: int | None = None, rollout: bool = False,
             device: str | None = None, num_heads: int | None = None, **overrides) -> dict[str, Path]:
    """Write the attention figures of ``video`` under ``out``; returns what was written."""
    overrides = {**overrides, "num_clips": 1, "num_crops": 1}
    model = load_model(checkpoint, num_heads=num_heads, **overrides)
    net = model.net.to(device_of(device))
    heads = net.blocks[0].attn.num_heads
    if head is not None and not 0 <= head < heads:
        raise ValueError(f"--head {head}: the model has heads 0..{heads - 1}")
    views = read_views(video, model.settings, net.patch_size, model.prepare)  # the evaluation's torchvision views
    view = torch.from_numpy(views[:1]).to(next(net.parameters()).device)  # (1, C, T, H, W)
    t = view.shape[2]
    grid = attention_maps.grid_of(net, view)
    names = (
        list(net.attention_modules()) if rollout
        else attention_maps.attention_module_names(net, [layer])
    )
    logits, captured = attention_maps.capture_maps(net, view, names)
    index = layer % len(net.blocks)
    modules = net.attention_modules()
    spatial_kind = kind_of(modules[f"blocks.{index}.attn"])
    temporal_kind = kind_of(modules[f"blocks.{index}.temporal_attn"])
    spatial = {k: v[0].cpu() for k, v in
               attention_maps.cls_maps(captured[f"blocks.{index}.attn"], t, grid, head, spatial_kind).items()}
    temporal = {k: v[0].cpu() for k, v in
                attention_maps.temporal_maps(captured[f"blocks.{index}.temporal_attn"], 1, head, temporal_kind).items()}
    shown = dict(spatial)
    if rollout:
        shown["rollout (positive)" if "positive" in spatial else "rollout"] = attention_maps.rollout(
            net, {k: {b: m.cpu() for b, m in v.items()} for k, v in captured.items()}, t, grid
        )
    probs = mean_view_probs(logits[None].cpu(), model.aggregate)[0]
    top = int(probs.argmax())
    frames = _display_frames(view[0].cpu(), model.settings.mean, model.settings.std)
    which = f"head {head}" if head is not None else "mean of heads"
    title = (f"{Path(video).name}: layer {index} ({which}); predicted {model.class_names[top]} "
             f"({float(probs[top]):.2f})")
    folder = Path(out)
    stem = f"{Path(video).stem}_layer{index}"
    signed = attention_maps.signed_names(spatial_kind, temporal_kind)
    arrays = {k: v.numpy() for k, v in shown.items()}
    written = {
        "grid": attention_grid_png(frames, arrays, folder / f"{stem}_maps.png", title, signed=signed),
        "gif": attention_gif(frames, arrays, folder / f"{stem}_maps.gif",
                             title=f"{Path(video).name}: layer {index} ({which})", signed=signed),
        "temporal": temporal_png({k: v.numpy() for k, v in temporal.items()}, folder / f"{stem}_temporal.png",
                                 f"{Path(video).name}: temporal attention, layer {index} ({which})", signed=signed),
    }
    tensors = folder / f"{stem}_maps.pt"
    with atomic_path(tensors) as partial:
        torch.save({"spatial": shown, "temporal": temporal, "frames": torch.from_numpy(frames), "layer": index,
                    "head": head, "probs": probs, "class_names": model.class_names}, partial)
    written["tensors"] = tensors
    return written


def run_subspaces(checkpoint: str, out: str, reference: str | None = None, k: int = 10, epsilon: float = 0.5,
                  num_heads: int | None = None) -> dict[str, Path]:
    """Write the subspace records (JSON) and heat map (PNG) under ``out``."""
    net = load_model(checkpoint, num_heads=num_heads, warn_defaults=False).net
    records = subspace_records(net)
    if not records:
        raise ValueError(f"{checkpoint}: no DnA attention module (a softmax model has no V- to compare)")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    if reference:
        ref_net = load_model(reference, num_heads=num_heads, warn_defaults=False).net
        records = compare_records(records, subspace_records(ref_net))
        intruders = folder / "intruders.json"
        write_json(intruders, intruder_records(net, ref_net, k, epsilon))
        written["intruders"] = intruders
    path = folder / "subspaces.json"
    write_json(path, records)
    written["records"] = path
    written["heatmap"] = subspace_png(records, folder / "subspaces.png", f"{Path(checkpoint).name}: V+ / V- subspaces")
    return written


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dna-video analyze", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    maps = commands.add_parser("maps", help="attention maps of both branches over a video's frames",
                               description="Spatial (cls to patches, per frame) and temporal attention maps of one "
                                           "layer, per branch, over the frames the model sees.")
    maps.add_argument("checkpoint", help="this project's .ckpt (or any checkpoint the importer reads)")
    maps.add_argument("video", help="a video file")
    maps.add_argument("--out", required=True, help="output folder")
    maps.add_argument("--layer", type=int, default=-1, help="block index, negative from the end (default -1: the last)")
    maps.add_argument("--head", type=int, help="one head's maps (default: the mean over heads)")
    maps.add_argument("--rollout", action="store_true", help=ROLLOUT_HELP)
    maps.add_argument("--device", help="cpu, cuda... (default: cuda when available)")
    add_settings_arguments(maps)

    sub = commands.add_parser("subspaces", help="principal angles and inner products of V+/V- and Q+/Q- per head",
                              description="Per DnA attention module and head: principal angles between the row "
                                          "spaces of V+ and V- (and Q+, Q-), normalised Frobenius inner product "
                                          "(signed in this project's +alpha convention, and absolute), alpha.")
    sub.add_argument("checkpoint", help="this project's .ckpt (or any DnA checkpoint the importer reads)")
    sub.add_argument("--reference", help="a checkpoint to compare with (e.g. the one fine-tuning started from): "
                                         "intruder dimensions and the change of each figure")
    sub.add_argument("--out", required=True, help="output folder")
    sub.add_argument("--intruder-k", type=int, default=10, help="top singular vectors checked for intruders (default 10)")
    sub.add_argument("--intruder-epsilon", type=float, default=0.5,
                     help="an intruder's largest |cosine| to the reference's singular vectors is below this (default 0.5)")
    sub.add_argument("--num-heads", type=int, help="head count, for a checkpoint that does not state it")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "maps":
            if args.head is not None and args.rollout:
                raise ValueError("--rollout uses the mean over heads: leave out --head")
            written = run_maps(args.checkpoint, args.video, args.out, args.layer, args.head, args.rollout, args.device,
                               args.num_heads, **settings_overrides(args))
        else:
            written = run_subspaces(args.checkpoint, args.out, args.reference, args.intruder_k, args.intruder_epsilon,
                                    args.num_heads)
    except (FileNotFoundError, ValueError, VideoDecodeError) as exc:
        raise SystemExit(f"error: {exc}") from None
    for what, path in written.items():
        print(f"{what}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
