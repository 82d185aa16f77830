"""A model card for a trained checkpoint: ``dna-video checkpoints card CKPT [--out FILE]``.

Everything comes from the run itself: the checkpoint (model hyper-parameters, class names,
epoch, the weights it started from), the run's resolved ``config.yaml`` (data, protocol, recipe:
the exact command) and its ``summary.json`` (best validation score, test metrics, clips/s); the
network is built from the checkpoint's hyper-parameters and loaded with its weights (strictly),
so the geometry, parameter count and cost per view (:mod:`dna_video.models.flops`) are those of
the network the checkpoint holds.

A checkpoint of a ``VideoClassifier`` gets a TimeSformer card, one of a
``ProbeClassifierModule`` a card of the probes over their frozen TimeSformer; an image model's
checkpoint is refused in one line. The section on weights and licences names the weights the
run started from, follows this project's own checkpoints back to the weights they started from,
and states each source's licence as far as it is known (:mod:`.lineage`).

No torch at import (``import dna_video.runs`` stays light): making a card imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dna_video import __version__
from dna_video.common.defaults import IMG_SIZE, NUM_FRAMES
from dna_video.runs.folders import run_folder
from dna_video.runs.lineage import Origin, init_source, licence_lines, weights_history
from dna_video.runs.summary import read_summary

if TYPE_CHECKING:
    import torch

    from dna_video.models.flops import ViewCost
    from dna_video.models.timesformer import TimeSformer

__all__ = ["model_card", "weights_history", "Origin"]

_TASK_CLASSES = {"video": "VideoClassifier", "probe": "ProbeClassifierModule", "image": "ImageClassifier"}


def _spec(spec: Any) -> str:
    if isinstance(spec, dict) and "class_path" in spec:
        args = ", ".join(f"{k}={v}" for k, v in (spec.get("init_args") or {}).items())
        return f"`{spec['class_path'].rsplit('.', 1)[-1]}({args})`"
    return "none" if spec is None else f"`{spec}`"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


# ---------------------------------------------------------------------------------------------
# Which network the checkpoint holds, built and loaded


def _task(hparams: dict[str, Any], weights: dict[str, torch.Tensor]) -> str:
    """``video``, ``probe`` or ``image``, from what the checkpoint holds."""
    if "probe" in hparams or any(k.startswith("backbone.") for k in weights):
        return "probe"
    return "video" if "time_embed" in weights else "image"


def _task_name(hparams: dict[str, Any], task: str) -> str:
    named = str(hparams.get("_class_path") or "").rpartition(".")[2]
    return named or _TASK_CLASSES[task]


def _build(task: str, hparams: dict[str, Any], weights: dict[str, torch.Tensor], path: Path) -> torch.nn.Module:
    """The task's network from the checkpoint's hyper-parameters, with the checkpoint's weights
    loaded strictly: the card then describes exactly the network the checkpoint holds."""
    from dna_video.checkpoints.io import CheckpointError
    from dna_video.models.probe import ProbeClassifier
    from dna_video.models.timesformer import TimeSformerSpec

    spec = replace(TimeSformerSpec.of(hparams.get("network")), compile=False)
    num_classes = int(hparams["num_classes"])
    backbone = spec.build(num_classes, int(hparams.get("num_frames", NUM_FRAMES)), int(hparams.get("img_size", IMG_SIZE)))
    net: torch.nn.Module = backbone
    if task == "probe":
        backbone.reset_head(0)  # the probe has its own head
        options = {k: v for k, v in (hparams.get("probe") or {}).items() if k != "init_from_backbone"}
        # Built without copying the backbone into the interaction modules: the weights load next.
        net = ProbeClassifier(backbone, num_classes, init_from_backbone=False, head_dropout=spec.head_dropout, **options)
    try:
        net.load_state_dict(weights)
    except RuntimeError as e:
        first = str(e).strip().splitlines()
        raise CheckpointError(
            f"{path}: its weights do not fit the network its hyper-parameters describe, so no card can "
            f"describe it truthfully ({first[1].strip() if len(first) > 1 else first[0]})"
        ) from None
    return net


# ---------------------------------------------------------------------------------------------
# What the card knows: the checkpoint, its run's files, the network it holds


def _read_checkpoint(checkpoint: Path) -> tuple[dict[str, Any], int, dict[str, Any], str]:
    """The checkpoint as saved, its format (before the upgrade, which writes the current one),
    the upgraded checkpoint and its task; a video or probe checkpoint of this project, or a
    :class:`~dna_video.checkpoints.io.CheckpointError` in one line."""
    from dna_video.checkpoints.io import CheckpointError, load_torch_file
    from dna_video.checkpoints.upgrade import FORMAT_KEY, upgrade_checkpoint

    state = load_torch_file(checkpoint, weights_only=False)
    if not isinstance(state, dict) or "hyper_parameters" not in state:
        raise CheckpointError(f"{checkpoint}: not a checkpoint written by this project's cli.py fit (no hyper_parameters)")
    fmt = state.get(FORMAT_KEY, 1)
    upgraded = upgrade_checkpoint(state)
    hparams = upgraded["hyper_parameters"]
    task = _task(hparams, _weights(upgraded))
    if task == "image":
        raise CheckpointError(
            f"{checkpoint}: a checkpoint of {_task_name(hparams, task)} (an image model); checkpoints card describes "
            "video models (VideoClassifier, ProbeClassifierModule). Evaluate it with: dna-video test --config "
            f"<its run>/config.yaml --ckpt_path {checkpoint}"
        )
    return state, fmt, upgraded, task


def _weights(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The network's weights of a Lightning checkpoint (``net.`` prefix removed)."""
    return {k.removeprefix("net."): v for k, v in (checkpoint.get("state_dict") or {}).items() if k.startswith("net.")}


@dataclass
class _Facts:
    """What a card states, read once: the checkpoint (``state`` as saved, ``hparams`` upgraded),
    its run's ``config.yaml`` and ``summary.json`` ({} when missing), the network it holds."""

    checkpoint: Path
    state: dict[str, Any]
    fmt: int
    hparams: dict[str, Any]
    task: str
    config_file: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    net: torch.nn.Module
    trained: int  # parameters that train (counted before the cost turns gradients off)

    @classmethod
    def read(cls, checkpoint: Path) -> "_Facts":
        state, fmt, upgraded, task = _read_checkpoint(checkpoint)
        hparams = upgraded["hyper_parameters"]
        run = run_folder(checkpoint)
        config_file = run / "config.yaml"
        config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
        net = _build(task, hparams, _weights(upgraded), checkpoint)
        trained = sum(p.numel() for p in net.parameters() if p.requires_grad)
        return cls(checkpoint, state, fmt, hparams, task, config_file, config, read_summary(run), net, trained)

    @property
    def run(self) -> Path:
        return self.config_file.parent

    @property
    def network(self) -> dict[str, Any]:
        return self.hparams.get("network") or {}

    @property
    def backbone(self) -> TimeSformer:
        return self.net.backbone if self.task == "probe" else self.net

    @cached_property
    def cost(self) -> ViewCost:
        from dna_video.models.flops import view_cost

        # Counted without gradients anywhere: under the counter's no_grad, the probe's expanded
        # probe tokens still say requires_grad without a grad_fn, which the counter's hooks refuse.
        return view_cost(self.net.requires_grad_(False).to("meta"), self.backbone.num_frames, self.backbone.img_size)

    @property
    def recipe(self) -> dict[str, Any]:
        # The optimiser and schedule are callables, not hyper-parameters: the run's config.yaml
        # holds their specs (under model.init_args since 0.2, under model in 0.1).
        model_config = self.config.get("model") or {}
        return model_config.get("init_args", model_config) if isinstance(model_config, dict) else {}

    @property
    def data(self) -> dict[str, Any]:
        return self.config.get("data") or {}

    @property
    def data_args(self) -> dict[str, Any]:
        return self.data.get("init_args") or {}

    @property
    def trainer(self) -> dict[str, Any]:
        return self.config.get("trainer") or {}

    @property
    def views(self) -> int | None:
        args = self.data_args
        return int(args.get("test_num_clips", 1)) * int(args.get("test_num_crops", 1)) if args else None

    @property
    def dataset(self) -> str | None:
        return self.data["class_path"].rsplit(".", 1)[-1] if self.data.get("class_path") else None

    @cached_property
    def history(self) -> list[Origin]:
        return weights_history(init_source(self.state, self.hparams))

    def unknown(self, what: str) -> str:
        return f"The run's config.yaml was not found beside the checkpoint ({self.config_file}): its {what} is not known here."


# ---------------------------------------------------------------------------------------------
# The card's sections


def _title(f: _Facts, what: str) -> str:
    """``# <run name><what>, <dataset> <protocol>``."""
    name = (f.trainer.get("logger") or {}).get("init_args", {}).get("name") or f.run.name
    protocol = f.data_args.get("protocol")
    where = (f", {f.dataset}" + (f" {protocol}" if protocol else "")) if f.dataset else ""
    return f"# {name}{what}{where}"


def _made(f: _Facts) -> str:
    # The checkpoint records its format, not the dna-video version that trained it.
    return (f"Checkpoint format {f.fmt}" + (" (written by dna-video 0.1)" if f.fmt == 1 else "")
            + f"; card written by dna-video {__version__}.")


def _attention(network: dict[str, Any]) -> str:
    from dna_video.models.attention import DEFAULT_ATTENTION  # torch: a card has built the network by now

    attention = network.get("attention", DEFAULT_ATTENTION)
    spatial = network.get("spatial_attention") or attention
    temporal = network.get("temporal_attention") or attention
    return f"`{spatial}`" if spatial == temporal else f"spatial `{spatial}`, temporal `{temporal}`"


def _geometry(backbone: TimeSformer) -> str:
    return (f"width {backbone.embed_dim}, depth {len(backbone.blocks)}, {backbone.blocks[0].attn.num_heads} "
            f"heads, patch {backbone.patch_size}")


def _started(f: _Facts) -> str:
    return "random initialisation" if f.history[0].source is None else f"`{f.history[0].source}`"


def _probe_head(f: _Facts) -> tuple[list[str], str, str]:
    """The title, summary and first rows of a probe's card; its parameters cell and started row."""
    from dna_video.models.attention import DEFAULT_ATTENTION

    net, network, probe = f.net, f.network, f.hparams.get("probe") or {}
    lines = [
        _title(f, f": probes over a frozen TimeSformer ({_attention(network)} attention)"),
        "",
        f"Video action recognition by {net.probes.shape[1]} learned probe tokens reading a frozen "
        f"divided space-time TimeSformer through `{probe.get('cross_attention', DEFAULT_ATTENTION)}` cross-attention "
        "(VisCoP's probes; DnA = Denoising Attention, Campos et al., ECCV 2026); only the probes, their "
        f"interaction modules, the final norm and the head are trained ({_task_name(f.hparams, f.task)}). {_made(f)}",
        "",
        "## Model",
        "",
        "| | |",
        "|---|---|",
        f"| backbone (frozen) | `{network.get('arch')}` TimeSformer, {_attention(network)} attention: "
        f"{_geometry(f.backbone)} |",
        f"| probes | {net.probes.shape[1]} tokens reading block(s) {', '.join(str(i) for i in net.layers)} of "
        f"{len(f.backbone.blocks)}, interaction `{probe.get('interaction', 'replace')}` |",
    ]
    parameters = (f"{f.cost.parameters / 1e6:.2f} M ({f.cost.parameters:,}), of which {f.trained:,} trained: "
                  "the probes, interaction modules, norm and head")
    return lines, parameters, f"| backbone weights from | {_started(f)} |"


def _video_head(f: _Facts) -> tuple[list[str], str, str]:
    """The title, summary and first rows of a TimeSformer's card; its parameters cell and started row."""
    network = f.network
    lines = [
        _title(f, f": TimeSformer with {network.get('attention', '?')} attention"),
        "",
        "Video action recognition with a divided space-time TimeSformer; attention: "
        f"{_attention(network)} (DnA = Denoising Attention, Campos et al., ECCV 2026). {_made(f)}",
        "",
        "## Model",
        "",
        "| | |",
        "|---|---|",
        f"| architecture | `{network.get('arch')}`: {_geometry(f.backbone)} |",
    ]
    parameters = f"{f.cost.parameters / 1e6:.2f} M"
    if f.hparams.get("freeze_backbone"):
        parameters += " (backbone frozen: only the head trained)"
    return lines, parameters, f"| started from | {_started(f)} |"


def _model_section(f: _Facts) -> list[str]:
    lines, parameters, started_row = _probe_head(f) if f.task == "probe" else _video_head(f)
    backbone, cost, views = f.backbone, f.cost, f.views
    return lines + [
        f"| input | {backbone.num_frames} frames x {backbone.img_size} x {backbone.img_size} |",
        f"| classes | {backbone.num_classes if f.task == 'video' else f.net.head.out_features} |",
        f"| parameters | {parameters} |",
        f"| cost per view | {cost.gmacs:.3g} GFLOPs (multiply-adds, torch's counter) |",
        f"| views per video | {views} ({cost.gmacs * views:.3g} GFLOPs per video) |" if views
        else "| views per video | not known (no config.yaml beside the checkpoint) |",
        started_row,
    ]


def _data_section(f: _Facts) -> list[str]:
    lines = ["## Data", ""]
    args, evaluation, protocol = f.data_args, f.hparams.get("evaluation") or {}, f.data_args.get("protocol")
    if args:
        lines.append(
            f"DataModule `{f.data.get('class_path', '?')}`" + (f", protocol `{protocol}`" if protocol else "")
            + f"; {args.get('num_frames')} frames at sampling rate {args.get('sampling_rate')} "
            f"({args.get('target_fps')} fps), crop {args.get('crop_size')}, mean {args.get('mean')}, "
            f"std {args.get('std')}; evaluation on {args.get('test_num_clips')} clip(s) x "
            f"{args.get('test_num_crops')} crop(s), views combined by {evaluation.get('view_aggregation')} of "
            f"{evaluation.get('aggregate')}."
        )
    else:
        lines.append(f.unknown("data"))
    class_names = f.state.get("class_names") or []
    if class_names:
        lines += ["", f"Classes (label order): {', '.join(class_names)}."]
    return lines


def _recipe_section(f: _Facts) -> list[str]:
    this = f"epoch {f.state.get('epoch')}, step {f.state.get('global_step')}."
    if not f.config:
        return ["## Recipe", "", f.unknown("recipe") + f" From the checkpoint: {this}"]
    recipe, trainer = f.recipe, f.trainer
    return ["## Recipe", "", (
        f"Optimiser {_spec(recipe.get('optimizer'))}, schedule {_spec(recipe.get('lr_scheduler'))}, "
        f"{trainer.get('max_epochs')} epochs, batch {f.data_args.get('batch_size')} per device on "
        f"{trainer.get('devices')} device(s), precision {trainer.get('precision') or '32-true (float32)'}, seed "
        f"{f.config.get('seed_everything')}; this checkpoint: {this}"
    )]


def _results_section(f: _Facts) -> list[str]:
    lines = ["## Results", ""]
    fit, test = f.summary.get("fit", {}), f.summary.get("test", {})
    if fit.get("best_score") is not None:
        lines.append(f"Best validation {fit.get('monitor')}: {_percent(fit['best_score'])}%.")
    metrics = test.get("metrics") or {}
    if metrics:
        lines += [
            "", "| split | top-1 (%) | top-5 (%) | mean per-class accuracy (%) |", "|---|---:|---:|---:|",
            f"| test | {_percent(metrics.get('test/top1'))} | {_percent(metrics.get('test/top5'))} "
            f"| {_percent(metrics.get('test/mca'))} |",
            "", f"Tested checkpoint: `{Path(test.get('checkpoint') or f.checkpoint).name}`.",
        ]
    elif f.summary:
        checkpoint = f.checkpoint
        tested = f"checkpoints/{checkpoint.name}" if checkpoint.parent.name == "checkpoints" else checkpoint.name
        lines.append(f"Not tested yet: `dna-video test --config config.yaml --ckpt_path {tested}`.")
    else:
        lines.append(f"No summary.json beside the checkpoint (in {f.run}): no results are known here.")
    clips = fit.get("throughput", {}).get("perf/epoch_train_clips_per_s")
    if clips:
        memory = fit.get("peak_gpu_memory_gb")
        lines += ["", f"Training ran at {clips:.1f} clips/s" + (f", peak GPU memory {memory:.1f} GB." if memory else ".")]
    return lines


def _reproduce_section(f: _Facts) -> list[str]:
    if not f.config:
        return ["## Reproduce", "", f"The run's config.yaml was not found beside the checkpoint ({f.config_file})."]
    return [
        "## Reproduce", "",
        "With dna-video installed and the dataset at the same root (or `--data.init_args.root`):",
        "", "```bash", "dna-video fit --config config.yaml", "```", "",
        "`config.yaml` (the run's resolved configuration):", "", "```yaml",
        yaml.safe_dump(f.config, sort_keys=False).rstrip(), "```",
    ]


def model_card(checkpoint: str | Path) -> str:
    """Markdown model card of a checkpoint written by ``dna-video fit`` (a video or probe model)."""
    f = _Facts.read(Path(checkpoint))
    lines: list[str] = []
    for section in (_model_section(f), _data_section(f), _recipe_section(f), _results_section(f),
                    licence_lines(f.history, f.dataset), _reproduce_section(f)):
        lines += ([""] if lines else []) + section  # one empty line between sections
    return "\n".join(lines) + "\n"
