"""A model card for a trained checkpoint: ``dna-video checkpoints card CKPT [--out FILE]``.

Everything comes from the run itself: the checkpoint (model hyper-parameters, class names,
epoch), the run's resolved ``config.yaml`` (data, protocol, recipe: the exact command) and its
``summary.json`` (best validation score, test metrics, clips/s); the cost per view is counted
by torch on the model (:mod:`dna_video.models.flops`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dna_video import __version__
from dna_video.models.flops import view_cost
from dna_video.checkpoints.io import CheckpointError, load_torch_file
from dna_video.checkpoints.loading import timesformer_from_checkpoint
from dna_video.checkpoints.run_summary import read_summary
from dna_video.checkpoints.upgrade import upgrade_checkpoint

__all__ = ["model_card"]


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


def model_card(checkpoint: str | Path) -> str:
    """Markdown model card of a checkpoint written by ``cli.py fit``."""
    checkpoint = Path(checkpoint)
    state = load_torch_file(checkpoint, weights_only=False)
    if not isinstance(state, dict) or "hyper_parameters" not in state:
        raise CheckpointError(f"{checkpoint}: not a checkpoint written by this project's cli.py fit (no hyper_parameters)")
    run = _run_folder(checkpoint)
    config_file = run / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
    summary = read_summary(run)
    hparams = upgrade_checkpoint(state)["hyper_parameters"]
    network, evaluation = hparams.get("network") or {}, hparams.get("evaluation") or {}
    # The optimiser and schedule are callables, not hyper-parameters: the run's config.yaml
    # holds their specs (under model.init_args since 0.2, under model in 0.1).
    model_config = config.get("model") or {}
    recipe = model_config.get("init_args", model_config) if isinstance(model_config, dict) else {}
    data = config.get("data") or {}
    data_args = data.get("init_args") or {}
    trainer = config.get("trainer") or {}

    model, _ = timesformer_from_checkpoint(checkpoint, load_kwargs={"log_report": False})
    cost = view_cost(model.to("meta"), model.num_frames, model.img_size)
    views = int(data_args.get("test_num_clips", 1)) * int(data_args.get("test_num_crops", 1))
    class_names = state.get("class_names") or []
    dataset = data.get("class_path", "unknown").rsplit(".", 1)[-1]
    protocol = data_args.get("protocol")
    name = (trainer.get("logger") or {}).get("init_args", {}).get("name") or run.name

    lines = [
        f"# {name}: TimeSformer with {network.get('attention', '?')} attention, {dataset}"
        + (f" {protocol}" if protocol else ""),
        "",
        "Video action recognition with a divided space-time TimeSformer; attention: "
        f"`{network.get('attention')}` (DnA = Denoising Attention, Campos et al., ECCV 2026). "
        f"Trained with dna-video {__version__}.",
        "",
        "## Model",
        "",
        "| | |",
        "|---|---|",
        f"| architecture | `{network.get('arch')}`: width {model.embed_dim}, depth {len(model.blocks)}, "
        f"{model.blocks[0].attn.num_heads} heads, patch {model.patch_size} |",
        f"| input | {model.num_frames} frames x {model.img_size} x {model.img_size} |",
        f"| classes | {model.num_classes} |",
        f"| parameters | {cost.parameters / 1e6:.2f} M |",
        f"| cost per view | {cost.gmacs:.1f} GFLOPs (multiply-adds, torch's counter) |",
        f"| views per video | {views} ({cost.gmacs * views:.1f} GFLOPs per video) |",
        f"| started from | `{state.get('initialised_from') or (hparams.get('init') or {}).get('source') or 'scratch'}` |",
        "",
        "## Data",
        "",
        f"DataModule `{data.get('class_path', '?')}`" + (f", protocol `{protocol}`" if protocol else "")
        + f"; {data_args.get('num_frames')} frames at sampling rate {data_args.get('sampling_rate')} "
        f"({data_args.get('target_fps')} fps), crop {data_args.get('crop_size')}, mean {data_args.get('mean')}, "
        f"std {data_args.get('std')}; evaluation on {data_args.get('test_num_clips')} clip(s) x "
        f"{data_args.get('test_num_crops')} crop(s), views combined by {evaluation.get('view_aggregation')} of "
        f"{evaluation.get('aggregate')}.",
    ]
    if class_names:
        lines += ["", f"Classes (label order): {', '.join(class_names)}."]
    lines += [
        "",
        "## Recipe",
        "",
        f"Optimiser {_spec(recipe.get('optimizer'))}, schedule {_spec(recipe.get('lr_scheduler'))}, "
        f"{trainer.get('max_epochs')} epochs, batch {data_args.get('batch_size')} per device on "
        f"{trainer.get('devices')} device(s), precision {trainer.get('precision') or '32-true (float32)'}, seed "
        f"{config.get('seed_everything')}; this checkpoint: epoch {state.get('epoch')}, step {state.get('global_step')}.",
        "",
        "## Results",
        "",
    ]
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
    else:
        lines.append("Not tested yet: `python cli.py test --config config.yaml --ckpt_path <this checkpoint>`.")
    clips = fit.get("throughput", {}).get("perf/epoch_train_clips_per_s")
    if clips:
        memory = fit.get("peak_gpu_memory_gb")
        lines += ["", f"Training ran at {clips:.1f} clips/s" + (f", peak GPU memory {memory:.1f} GB." if memory else ".")]
    lines += ["", "## Reproduce", ""]
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
