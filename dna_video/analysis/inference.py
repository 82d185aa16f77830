"""A trained network and its evaluation data settings, rebuilt from a checkpoint alone.

This project's ``.ckpt`` files carry what is needed to run the model on new videos without
the dataset:

* ``class_names``: the class names in label order (from the DataModule);
* ``datamodule_hyper_parameters``: the DataModule's arguments, among them the test settings
  (frames, sampling rate and frame rate, sampling mode, crop, mean/std, test clips x crops)
  and the decoder.

Older checkpoints without them: the settings come from the run's ``config.yaml`` (two folders
up, where LightningCLI writes it), else from the model's frame count and resolution and the
DataModule defaults, with a warning. Checkpoints of other layouts (timm, official
TimeSformer, DnA reference, Hugging Face) are imported by :mod:`dna_video.checkpoints`.
Every setting can be overridden.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from einops import rearrange
from torch import Tensor

from dna_video.checkpoints import CheckpointError, timesformer_from_checkpoint
from dna_video.checkpoints.layouts import infer_geometry
from dna_video.checkpoints.upgrade import upgrade_checkpoint
from dna_video.data.eval_settings import EvalSettings, read_view_frames
from dna_video.data.sampling import short_videos_note
from dna_video.data.transforms import EvalClipTransform
from dna_video.data.video import VideoTooSmallError
from dna_video.models.timesformer import TimeSformer

log = logging.getLogger(__name__)

__all__ = [
    "EvalSettings", "LoadedModel", "load_model", "VideoTooSmallError", "VideoViews", "load_views", "read_views",
    "view_logits", "device_of",
]


def _settings_from_config(config: Path) -> EvalSettings | None:
    """Test settings of a LightningCLI ``config.yaml`` (``data.init_args``)."""
    try:
        data = (yaml.safe_load(config.read_text()) or {}).get("data") or {}
    except (OSError, yaml.YAMLError):
        return None
    return _settings_from_arguments(data.get("init_args", data) if isinstance(data, dict) else {})


def _settings_from_arguments(args: dict[str, Any]) -> EvalSettings:
    """Test settings of a DataModule's constructor arguments; those not given take the
    :class:`EvalSettings` defaults, which are :class:`~dna_video.data.datamodule.VideoDataModule`'s
    (read here without importing it, so predict starts without Lightning)."""
    defaults = EvalSettings()
    views = {"num_clips": args.get("test_num_clips", defaults.num_clips),
             "num_crops": args.get("test_num_crops", defaults.num_crops)}
    return EvalSettings.from_fields({**args, **views})


@dataclass
class LoadedModel:
    """A network ready for evaluation and what is known about how it was evaluated.

    Attributes:
        net: the TimeSformer, in eval mode.
        class_names: names in label order (``class_0``... when the checkpoint has none).
        settings: evaluation clip settings.
        aggregate: how views are combined into probabilities (``logits``: softmax of the mean
            logits; ``probs``: mean of the view probabilities).
        source: the checkpoint's path.
        settings_from: where the settings came from (for the log).
    """

    net: TimeSformer
    class_names: list[str]
    settings: EvalSettings
    aggregate: str = "logits"
    source: str = ""
    settings_from: str = ""


def _load_lightning(path: Path) -> dict[str, Any] | None:
    """A Lightning checkpoint of this project as a dict, else None (another layout)."""
    if path.is_dir() or path.suffix != ".ckpt":
        return None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)  # hyper-parameters are pickled
    except Exception as exc:  # noqa: BLE001 - the unpickler raises many kinds on foreign files
        raise CheckpointError(f"{path}: not a PyTorch checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict) or "hyper_parameters" not in obj or "state_dict" not in obj:
        return None
    return obj


def _refuse_other_tasks(path: Path, hparams: dict[str, Any], state: dict[str, Tensor]) -> None:
    """One line naming what the checkpoint is and the command that takes it, when its network is
    not a TimeSformer (a probe over one, an image ViT): these tools read a TimeSformer's views."""
    if "time_embed" in state:
        return
    task = str(hparams.get("_class_path") or "").rpartition(".")[2]
    if not task:
        task = "ProbeClassifierModule" if any(k.startswith("backbone.") for k in state) else "ImageClassifier"
    what = "a probe over a frozen TimeSformer" if any(k.startswith("backbone.") for k in state) else "an image model"
    raise CheckpointError(
        f"{path}: a checkpoint of {task} ({what}); predict and analyze read a video TimeSformer's "
        f"checkpoint. Evaluate it with: dna-video test --config <its run>/config.yaml --ckpt_path {path}"
    )


def load_model(path: str | Path, num_heads: int | None = None, warn_defaults: bool = True,
               **overrides: Any) -> LoadedModel:
    """The network of checkpoint ``path`` with its class names and evaluation settings.

    ``overrides``: fields of :class:`EvalSettings` to change (``None``: keep); ``num_heads``
    for a checkpoint of another layout that does not state its head count; ``warn_defaults``:
    warn when the settings are defaults (not stated by the checkpoint or its run).

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: not a checkpoint the importer reads.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    lightning = _load_lightning(path)
    if lightning is not None:
        hparams = dict(upgrade_checkpoint(lightning)["hyper_parameters"])
        state = {k.removeprefix("net."): v for k, v in lightning["state_dict"].items() if k.startswith("net.")}
        _refuse_other_tasks(path, hparams, state)
        kwargs = infer_geometry(state, None, hparams)
        net = TimeSformer(**kwargs)
        net.load_state_dict(state)
        names = lightning.get("class_names")
        aggregate = (hparams.get("evaluation") or {}).get("aggregate", hparams.get("aggregate", "logits"))
        if lightning.get("datamodule_hyper_parameters"):
            settings = _settings_from_arguments(dict(lightning["datamodule_hyper_parameters"]))
            settings_from = "the checkpoint"
        elif (config := path.parent.parent / "config.yaml").is_file() and (found := _settings_from_config(config)):
            settings, settings_from = found, str(config)
        else:
            settings = EvalSettings(num_frames=net.num_frames, crop_size=net.img_size)
            settings_from = "defaults"
    else:
        extra = {"num_heads": num_heads} if num_heads else {}
        net, _ = timesformer_from_checkpoint(path, load_kwargs={"log_report": False}, **extra)
        names, aggregate = None, "logits"
        settings = EvalSettings(num_frames=net.num_frames, crop_size=net.img_size)
        settings_from = "defaults"
    if settings_from == "defaults" and warn_defaults:
        log.warning(
            "%s states no evaluation data settings: using %d frames, crop %d and the DataModule defaults "
            "(sampling rate %d at %s fps, mean %s, std %s, %d clip(s) x %d crop(s)); override them if the "
            "model was trained otherwise", path, settings.num_frames, settings.crop_size, settings.sampling_rate,
            settings.target_fps, settings.mean, settings.std, settings.num_clips, settings.num_crops,
        )
    if not names or len(names) != net.num_classes:
        names = [f"class_{i}" for i in range(net.num_classes)]
    net.eval()
    return LoadedModel(net, list(names), settings.replace(**overrides), aggregate, str(path), settings_from)


@dataclass
class VideoViews:
    """The evaluation views of one video and its length against the clip's."""

    views: Tensor  # (V, C, T, crop, crop), clip-major
    num_frames: int  # the file's decodable frames
    frames_needed: int  # fewest frames for clips without repeated frames

    @property
    def short(self) -> bool:
        """Shorter than the clip: sampled with frames repeated (``short_video``)."""
        return self.num_frames < self.frames_needed


def load_views(path: str, settings: EvalSettings, min_side: int = 0) -> VideoViews:
    """Every evaluation view of one video file, clip-major like the test loader's
    (:class:`~dna_video.data.dataset.VideoClipDataset`), with its frame count.

    ``min_side``: refuse a video with a side below it (pass the network's ``patch_size``);
    checked on the header's size before decoding, and on the decoded frames.

    Raises:
        VideoDecodeError: the file cannot be decoded (the message names it and what it is).
        VideoTooSmallError: a side below ``min_side``.
    """
    decoded = read_view_frames(path, settings, min_side)
    clips = rearrange(torch.from_numpy(decoded.frames), "(k t) h w c -> k t c h w", k=settings.num_clips)
    transform = EvalClipTransform(settings.crop_size, settings.num_crops, settings.mean, settings.std)
    views = rearrange(torch.stack([transform(clip) for clip in clips]), "k s c t h w -> (k s) c t h w")
    return VideoViews(views, decoded.num_frames, settings.sampler.frames_needed(decoded.fps))


def read_views(path: str, settings: EvalSettings, min_side: int = 0) -> Tensor:
    """The views of :func:`load_views` (V, C, T, crop, crop); a video shorter than the clip is
    answered with a warning that says so.

    Raises:
        VideoDecodeError: the file cannot be decoded (the message names it and what it is).
        VideoTooSmallError: a side below ``min_side``.
    """
    loaded = load_views(path, settings, min_side)
    if loaded.short:
        log.warning("%s", short_videos_note([(path, loaded.num_frames, loaded.frames_needed)]))
    return loaded.views


@torch.no_grad()
def view_logits(net: TimeSformer, views: Tensor, chunk: int = 32, features: bool = False) -> Tensor:
    """Per-view logits (or pre-head features) of views (V, C, T, H, W), ``chunk`` views a pass."""
    forward = net.forward_features if features else net
    return torch.cat([forward(part) for part in views.split(chunk)])


def device_of(name: str | None) -> torch.device:
    """``name`` as a device; None: CUDA when available, else CPU."""
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
