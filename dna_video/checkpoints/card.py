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
and states each source's licence as far as it is known
(:func:`dna_video.checkpoints.sources.weights_licence`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import yaml

from dna_video import __version__
from dna_video.checkpoints.io import CheckpointError, load_torch_file
from dna_video.checkpoints.run_summary import read_summary
from dna_video.checkpoints.sources import WeightsLicence, weights_licence
from dna_video.checkpoints.upgrade import FORMAT_KEY, upgrade_checkpoint
from dna_video.models.flops import view_cost
from dna_video.models.probe import ProbeClassifier
from dna_video.models.timesformer import TimeSformer, TimeSformerSpec

__all__ = ["model_card", "weights_history", "Origin"]

# How far the card follows checkpoints of this project back to their starting weights.
MAX_HISTORY = 8


def _run_folder(checkpoint: Path) -> Path:
    # Lightning writes <run>/checkpoints/<name>.ckpt beside <run>/config.yaml.
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


def _spec(spec: Any) -> str:
    if isinstance(spec, dict) and "class_path" in spec:
        args = ", ".join(f"{k}={v}" for k, v in (spec.get("init_args") or {}).items())
        return f"`{spec['class_path'].rsplit('.', 1)[-1]}({args})`"
    return "none" if spec is None else f"`{spec}`"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _init_source(state: dict[str, Any], hparams: dict[str, Any]) -> str | None:
    """The weights a checkpoint's run started from: ``initialised_from`` (where the task records
    them on saving), else the import still in the hyper-parameters (video ``init.source``,
    image ``init_from``); None: random initialisation."""
    return state.get("initialised_from") or (hparams.get("init") or {}).get("source") or hparams.get("init_from")


# ---------------------------------------------------------------------------------------------
# Which network the checkpoint holds, built and loaded


def _task(hparams: dict[str, Any], weights: dict[str, torch.Tensor]) -> str:
    """``video``, ``probe`` or ``image``, from what the checkpoint holds."""
    if "probe" in hparams or any(k.startswith("backbone.") for k in weights):
        return "probe"
    return "video" if "time_embed" in weights else "image"


def _task_name(hparams: dict[str, Any], task: str) -> str:
    named = str(hparams.get("_class_path") or "").rpartition(".")[2]
    return named or {"video": "VideoClassifier", "probe": "ProbeClassifierModule", "image": "ImageClassifier"}[task]


def _build(task: str, hparams: dict[str, Any], weights: dict[str, torch.Tensor], path: Path) -> torch.nn.Module:
    """The task's network from the checkpoint's hyper-parameters, with the checkpoint's weights
    loaded strictly: the card then describes exactly the network the checkpoint holds."""
    spec = replace(TimeSformerSpec.of(hparams.get("network")), compile=False)
    num_classes = int(hparams["num_classes"])
    backbone = spec.build(num_classes, int(hparams.get("num_frames", 8)), int(hparams.get("img_size", 224)))
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
# Where the weights come from


@dataclass(frozen=True)
class Origin:
    """One step back in a model's weights: ``source`` (None: random initialisation), whether it
    is a checkpoint of this project read here (``ours``), and the licence known of an outside
    source."""

    source: str | None
    ours: bool = False
    licence: WeightsLicence | None = None


def weights_history(source: str | None) -> list[Origin]:
    """The weights a run started from, then (for a checkpoint of this project found on this
    machine) what that checkpoint's run started from, and so on: ends with random
    initialisation, an outside source (with its licence, :func:`weights_licence`) or a
    checkpoint that cannot be read here (licence unknown)."""
    history: list[Origin] = []
    seen: set[Path] = set()
    while source is not None and len(history) < MAX_HISTORY:
        path = Path(source)
        state = None
        # Runs write Lightning's .ckpt; any other file is someone else's format.
        if path.suffix == ".ckpt" and path.is_file() and path.resolve() not in seen:
            seen.add(path.resolve())
            try:
                state = load_torch_file(path, weights_only=None)
            except CheckpointError:
                state = None
        if not (isinstance(state, dict) and "hyper_parameters" in state):
            history.append(Origin(source, licence=weights_licence(source)))
            return history
        history.append(Origin(source, ours=True))
        source = _init_source(state, upgrade_checkpoint(state)["hyper_parameters"])
    if source is None:
        history.append(Origin(None))
    else:  # a loop or a longer history than followed: the rest is not known here
        history.append(Origin(source, licence=weights_licence(source)))
    return history


def _origin_line(origin: Origin) -> str:
    if origin.source is None:
        return "random initialisation: no one else's weights."
    if origin.ours:
        return f"`{origin.source}`, a checkpoint of this project (read here); it started from:"
    licence = origin.licence
    if licence.licence is None:
        who = "" if licence.publisher == "unknown" else f"{licence.publisher}; "
        return f"`{origin.source}`: {who}licence unknown: {licence.terms}."
    return f"`{origin.source}`: {licence.publisher}, licence {licence.licence}: {licence.terms}."


def _licence_lines(history: list[Origin], dataset: str | None) -> list[str]:
    lines = [
        "## Weights and licences",
        "",
        "dna-video's code is Apache-2.0; it implements the TimeSformer and DnA "
        "methods from their papers and contains no code of their reference repositories (the NOTICE "
        "file says what it owes to whom). The licence of weights stays with the weights.",
        "",
        "Where this model's weights come from:",
        "",
    ]
    lines += [f"{'  ' * i}- {_origin_line(origin)}" for i, origin in enumerate(history)]
    restricted = [o for o in history if o.licence is not None and o.licence.non_commercial]
    unknown = [o for o in history if o.licence is not None and o.licence.licence is None]
    lines.append("")
    if restricted:
        first = restricted[0]
        lines.append(
            f"This model is made from {first.licence.licence} weights, those of {first.licence.publisher}: "
            "like them, it may be used and shared for non-commercial purposes only, with attribution; the "
            "Apache-2.0 licence of the code does not extend to these weights."
        )
    elif unknown:
        lines.append(
            f"The licence of this model's weights follows that of `{unknown[0].source}`, which dna-video "
            "does not know: check it before publishing or using this model."
        )
    else:
        lines.append(
            "No one else's weights are in this model: it was trained from random initialisation"
            + (" (through this project's own checkpoints)" if len(history) > 1 else "")
            + ". The terms of use of its training data" + (f" ({dataset})" if dataset else "")
            + " may still restrict its use: check them."
        )
    return lines


# ---------------------------------------------------------------------------------------------


def _attention(network: dict[str, Any]) -> str:
    attention = network.get("attention", "dna")
    spatial = network.get("spatial_attention") or attention
    temporal = network.get("temporal_attention") or attention
    return f"`{spatial}`" if spatial == temporal else f"spatial `{spatial}`, temporal `{temporal}`"


def _geometry(backbone: TimeSformer) -> str:
    return (f"width {backbone.embed_dim}, depth {len(backbone.blocks)}, {backbone.blocks[0].attn.num_heads} "
            f"heads, patch {backbone.patch_size}")


def model_card(checkpoint: str | Path) -> str:
    """Markdown model card of a checkpoint written by ``dna-video fit`` (a video or probe model)."""
    checkpoint = Path(checkpoint)
    state = load_torch_file(checkpoint, weights_only=False)
    if not isinstance(state, dict) or "hyper_parameters" not in state:
        raise CheckpointError(f"{checkpoint}: not a checkpoint written by this project's cli.py fit (no hyper_parameters)")
    fmt = state.get(FORMAT_KEY, 1)  # before the upgrade, which writes the current one
    upgraded = upgrade_checkpoint(state)
    hparams = upgraded["hyper_parameters"]
    weights = {k.removeprefix("net."): v for k, v in (upgraded.get("state_dict") or {}).items() if k.startswith("net.")}
    task = _task(hparams, weights)
    task_name = _task_name(hparams, task)
    if task == "image":
        raise CheckpointError(
            f"{checkpoint}: a checkpoint of {task_name} (an image model); checkpoints card describes video "
            "models (VideoClassifier, ProbeClassifierModule). Evaluate it with: dna-video test --config "
            f"<its run>/config.yaml --ckpt_path {checkpoint}"
        )
    run = _run_folder(checkpoint)
    config_file = run / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
    summary = read_summary(run)
    network, evaluation = hparams.get("network") or {}, hparams.get("evaluation") or {}
    # The optimiser and schedule are callables, not hyper-parameters: the run's config.yaml
    # holds their specs (under model.init_args since 0.2, under model in 0.1).
    model_config = config.get("model") or {}
    recipe = model_config.get("init_args", model_config) if isinstance(model_config, dict) else {}
    data = config.get("data") or {}
    data_args = data.get("init_args") or {}
    trainer = config.get("trainer") or {}

    net = _build(task, hparams, weights, checkpoint)
    backbone: TimeSformer = net.backbone if task == "probe" else net
    trained = sum(p.numel() for p in net.parameters() if p.requires_grad)
    # Counted without gradients anywhere: under the counter's no_grad, the probe's expanded
    # probe tokens still say requires_grad without a grad_fn, which the counter's hooks refuse.
    cost = view_cost(net.requires_grad_(False).to("meta"), backbone.num_frames, backbone.img_size)
    views = int(data_args.get("test_num_clips", 1)) * int(data_args.get("test_num_crops", 1)) if data_args else None
    class_names = state.get("class_names") or []
    dataset = data["class_path"].rsplit(".", 1)[-1] if data.get("class_path") else None
    protocol = data_args.get("protocol")
    name = (trainer.get("logger") or {}).get("init_args", {}).get("name") or run.name
    history = weights_history(_init_source(state, hparams))
    started = "random initialisation" if history[0].source is None else f"`{history[0].source}`"
    where = (f", {dataset}" + (f" {protocol}" if protocol else "")) if dataset else ""
    # The checkpoint records its format, not the dna-video version that trained it.
    made = (f"Checkpoint format {fmt}" + (" (written by dna-video 0.1)" if fmt == 1 else "")
            + f"; card written by dna-video {__version__}.")

    if task == "probe":
        layers = ", ".join(str(i) for i in net.layers)
        probe = hparams.get("probe") or {}
        lines = [
            f"# {name}: probes over a frozen TimeSformer ({_attention(network)} attention){where}",
            "",
            f"Video action recognition by {net.probes.shape[1]} learned probe tokens reading a frozen "
            f"divided space-time TimeSformer through `{probe.get('cross_attention', 'dna')}` cross-attention "
            "(VisCoP's probes; DnA = Denoising Attention, Campos et al., ECCV 2026); only the probes, their "
            f"interaction modules, the final norm and the head are trained ({task_name}). {made}",
            "",
            "## Model",
            "",
            "| | |",
            "|---|---|",
            f"| backbone (frozen) | `{network.get('arch')}` TimeSformer, {_attention(network)} attention: "
            f"{_geometry(backbone)} |",
            f"| probes | {net.probes.shape[1]} tokens reading block(s) {layers} of {len(backbone.blocks)}, "
            f"interaction `{probe.get('interaction', 'replace')}` |",
        ]
        parameters = (f"{cost.parameters / 1e6:.2f} M ({cost.parameters:,}), of which {trained:,} trained: "
                      "the probes, interaction modules, norm and head")
        started_row = f"| backbone weights from | {started} |"
    else:
        lines = [
            f"# {name}: TimeSformer with {network.get('attention', '?')} attention{where}",
            "",
            "Video action recognition with a divided space-time TimeSformer; attention: "
            f"{_attention(network)} (DnA = Denoising Attention, Campos et al., ECCV 2026). {made}",
            "",
            "## Model",
            "",
            "| | |",
            "|---|---|",
            f"| architecture | `{network.get('arch')}`: {_geometry(backbone)} |",
        ]
        parameters = f"{cost.parameters / 1e6:.2f} M"
        if hparams.get("freeze_backbone"):
            parameters += " (backbone frozen: only the head trained)"
        started_row = f"| started from | {started} |"
    lines += [
        f"| input | {backbone.num_frames} frames x {backbone.img_size} x {backbone.img_size} |",
        f"| classes | {backbone.num_classes if task == 'video' else net.head.out_features} |",
        f"| parameters | {parameters} |",
        f"| cost per view | {cost.gmacs:.3g} GFLOPs (multiply-adds, torch's counter) |",
        f"| views per video | {views} ({cost.gmacs * views:.3g} GFLOPs per video) |" if views
        else "| views per video | not known (no config.yaml beside the checkpoint) |",
        started_row,
        "",
        "## Data",
        "",
    ]
    unknown = f"The run's config.yaml was not found beside the checkpoint ({config_file}): its {{}} is not known here."
    if data_args:
        lines.append(
            f"DataModule `{data.get('class_path', '?')}`" + (f", protocol `{protocol}`" if protocol else "")
            + f"; {data_args.get('num_frames')} frames at sampling rate {data_args.get('sampling_rate')} "
            f"({data_args.get('target_fps')} fps), crop {data_args.get('crop_size')}, mean {data_args.get('mean')}, "
            f"std {data_args.get('std')}; evaluation on {data_args.get('test_num_clips')} clip(s) x "
            f"{data_args.get('test_num_crops')} crop(s), views combined by {evaluation.get('view_aggregation')} of "
            f"{evaluation.get('aggregate')}."
        )
    else:
        lines.append(unknown.format("data"))
    if class_names:
        lines += ["", f"Classes (label order): {', '.join(class_names)}."]
    lines += ["", "## Recipe", ""]
    this = f"epoch {state.get('epoch')}, step {state.get('global_step')}."
    if config:
        lines.append(
            f"Optimiser {_spec(recipe.get('optimizer'))}, schedule {_spec(recipe.get('lr_scheduler'))}, "
            f"{trainer.get('max_epochs')} epochs, batch {data_args.get('batch_size')} per device on "
            f"{trainer.get('devices')} device(s), precision {trainer.get('precision') or '32-true (float32)'}, seed "
            f"{config.get('seed_everything')}; this checkpoint: {this}"
        )
    else:
        lines.append(unknown.format("recipe") + f" From the checkpoint: {this}")
    lines += ["", "## Results", ""]
    fit, test = summary.get("fit", {}), summary.get("test", {})
    if fit.get("best_score") is not None:
        lines.append(f"Best validation {fit.get('monitor')}: {_percent(fit['best_score'])}%.")
    metrics = test.get("metrics") or {}
    if metrics:
        lines += [
            "", "| split | top-1 (%) | top-5 (%) | mean per-class accuracy (%) |", "|---|---:|---:|---:|",
            f"| test | {_percent(metrics.get('test/top1'))} | {_percent(metrics.get('test/top5'))} "
            f"| {_percent(metrics.get('test/mca'))} |",
            "", f"Tested checkpoint: `{Path(test.get('checkpoint') or checkpoint).name}`.",
        ]
    elif summary:
        tested = f"checkpoints/{checkpoint.name}" if checkpoint.parent.name == "checkpoints" else checkpoint.name
        lines.append(f"Not tested yet: `python cli.py test --config config.yaml --ckpt_path {tested}`.")
    else:
        lines.append(f"No summary.json beside the checkpoint (in {run}): no results are known here.")
    clips = fit.get("throughput", {}).get("perf/epoch_train_clips_per_s")
    if clips:
        memory = fit.get("peak_gpu_memory_gb")
        lines += ["", f"Training ran at {clips:.1f} clips/s" + (f", peak GPU memory {memory:.1f} GB." if memory else ".")]
    lines += ["", *_licence_lines(history, dataset), "", "## Reproduce", ""]
    if config:
        lines += [
            "With dna-video installed and the dataset at the same root (or `--data.init_args.root`):",
            "", "```bash", "python cli.py fit --config config.yaml", "```", "",
            "`config.yaml` (the run's resolved configuration):", "", "```yaml",
            yaml.safe_dump(config, sort_keys=False).rstrip(), "```",
        ]
    else:
        lines.append(f"The run's config.yaml was not found beside the checkpoint ({config_file}).")
    return "\n".join(lines) + "\n"
