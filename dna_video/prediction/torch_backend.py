"""A checkpoint's PyTorch network as a ``predict`` backend (:class:`TorchModel`), rebuilt from the
checkpoint alone (:func:`load_model`). The only module of :mod:`dna_video.prediction` that
imports torch when it is imported.

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

Views. A frame is prepared by torchvision's evaluation transform
(:class:`~dna_video.data.transforms.EvalClipTransform`, frame by frame: the same numbers as a
clip at a time), so that ``predict`` answers what ``cli.py test`` answers.

Attention. With ``attention=True`` the last block's spatial attention runs on its written-out
path (:func:`~dna_video.analysis.maps.capture_maps`: the same logits, plus the maps) and each
window keeps the cls token's attention over the patches of its centre crop, per branch (DnA:
``positive`` and ``negative``; softmax: ``softmax``), averaged over the window's frames and the
heads: (h, w) per branch in :attr:`TorchModel.window_maps`, one entry per window in order
(``predict --annotate-attention``).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import yaml
from einops import rearrange, reduce
from torch import Tensor

from dna_video.analysis.maps import attention_module_names, capture_maps, cls_maps
from dna_video.checkpoints import CheckpointError, timesformer_from_checkpoint
from dna_video.checkpoints.layouts import infer_geometry
from dna_video.checkpoints.upgrade import upgrade_checkpoint
from dna_video.data.eval_settings import EvalSettings
from dna_video.data.transforms import EvalClipTransform
from dna_video.data.video import VideoTooSmallError
from dna_video.models.attention import kind_of
from dna_video.models.timesformer import TimeSformer
from dna_video.prediction.backend import Backend
from dna_video.prediction.views import VideoViews, load_views, read_views
from dna_video.runs.folders import evaluation_folder
from dna_video.tasks.views import mean_view_probs

log = logging.getLogger(__name__)

__all__ = [
    "TorchModel", "load_model", "view_logits", "device_of",
    # 0.2's names (dna_video.analysis.inference, .window_network), kept one release
    "LoadedModel", "WindowNetwork", "EvalSettings", "VideoTooSmallError", "VideoViews", "load_views", "read_views",
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
class TorchModel(Backend):
    """A checkpoint's network as a ``predict`` backend, and what is known about how it was
    evaluated.

    Attributes:
        net: the TimeSformer, in eval mode.
        class_names: names in label order (``class_0``... when the checkpoint has none).
        settings: evaluation clip settings.
        aggregate: how views are combined into probabilities (``logits``: softmax of the mean
            logits; ``probs``: mean of the view probabilities).
        source: the checkpoint's path.
        settings_from: where the settings came from (for the log).
        device: where the network runs (cpu, cuda, cuda:1...; None: CUDA when available); it
            moves there when it first runs.
        attention: keep each window's spatial attention (see the module's docstring).
        window_maps: with ``attention``, per window answered: branch -> (h, w) map of the centre
            crop.
    """

    net: TimeSformer
    class_names: list[str]
    settings: EvalSettings
    aggregate: str = "logits"
    source: str = ""
    settings_from: str = ""
    device: str | None = None
    attention: bool = False
    window_maps: list[dict[str, np.ndarray]] = field(default_factory=list)
    runtime: ClassVar[str] = "pytorch"
    _transform: tuple[EvalSettings, EvalClipTransform] | None = field(default=None, init=False, repr=False,
                                                                     compare=False)
    _view_maps: list[dict[str, np.ndarray]] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def patch_size(self) -> int:
        return self.net.patch_size

    def using(self, device: str | None = None, attention: bool = False) -> TorchModel:
        """This model (the same network object) running on ``device``, keeping each window's
        attention when ``attention``; its own :attr:`window_maps`."""
        return dataclasses.replace(self, device=device, attention=attention, window_maps=[])

    def _target(self) -> torch.device:
        target = device_of(self.device)
        if next(self.net.parameters()).device != target:
            self.net.to(target)
        return target

    @torch.no_grad()
    def prepare(self, frames: np.ndarray) -> np.ndarray:
        """(n, H, W, 3) uint8 -> (n, crops, 3, crop, crop) float32: torchvision's evaluation
        transform, frame by frame."""
        if self._transform is None or self._transform[0] is not self.settings:
            settings = self.settings
            self._transform = (settings, EvalClipTransform(settings.crop_size, settings.num_crops, settings.mean,
                                                           settings.std))
        views = self._transform[1](torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2))
        return rearrange(views, "s c t h w -> t s c h w").numpy()

    @torch.no_grad()
    def logits(self, views: np.ndarray, chunk: int = 32) -> np.ndarray:
        target = self._target()
        tensors = torch.from_numpy(np.ascontiguousarray(views, np.float32))
        if not self.attention:
            return view_logits(self.net, tensors, chunk, device=target).float().cpu().numpy()
        name = attention_module_names(self.net, [-1], ["spatial"])[0]
        kind = kind_of(self.net.attention_modules()[name])
        frames, height, width = tensors.shape[2:]
        grid = (height // self.net.patch_size, width // self.net.patch_size)
        out = []
        for part in tensors.split(chunk):
            logits, captured = capture_maps(self.net, part.to(target), [name])
            per_branch = cls_maps(captured[name], frames, grid, kind=kind)  # view t h w
            self._view_maps.append({branch: reduce(m, "v t h w -> v h w", "mean").float().cpu().numpy()
                                    for branch, m in per_branch.items()})
            out.append(logits.float().cpu())
        return torch.cat(out).numpy()

    def combine(self, logits: np.ndarray) -> np.ndarray:
        """As :meth:`Backend.combine <dna_video.prediction.backend.Backend.combine>`, in torch's
        arithmetic: the numbers ``cli.py test`` computes, to the last bit."""
        return mean_view_probs(torch.from_numpy(logits), self.aggregate).numpy()

    def probs(self, views: np.ndarray, chunk: int = 32) -> np.ndarray:
        self._view_maps.clear()
        probs = super().probs(views, chunk)
        if self.attention:  # each window's centre crop (1 crop: the centre; 3 crops: start, centre, end)
            batch, crops = views.shape[:2]
            maps = {branch: np.concatenate([m[branch] for m in self._view_maps]) for branch in self._view_maps[0]}
            maps = {branch: m.reshape(batch, crops, *m.shape[1:]) for branch, m in maps.items()}
            self.window_maps += [{branch: m[b, crops // 2] for branch, m in maps.items()} for b in range(batch)]
        return probs

    @torch.no_grad()
    def embed(self, views: np.ndarray, chunk: int = 32) -> tuple[np.ndarray, np.ndarray]:
        target = self._target()
        features = view_logits(self.net, torch.from_numpy(np.ascontiguousarray(views, np.float32)), chunk,
                               features=True, device=target)
        return self.net.forward_head(features).float().cpu().numpy(), features.float().cpu().numpy()


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
               device: str | None = None, attention: bool = False, **overrides: Any) -> TorchModel:
    """The network of checkpoint ``path`` with its class names and evaluation settings, in
    eval mode on the CPU until it runs (then on ``device``: None = CUDA when available);
    ``attention``: keep each window's attention maps (:class:`TorchModel`).

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
        elif ((run := evaluation_folder(path)) is not None and (config := run / "config.yaml").is_file()
              and (found := _settings_from_config(config))):  # only a run's own config, not any parent's
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
    return TorchModel(net, list(names), settings.replace(**overrides), aggregate, str(path), settings_from, device,
                      attention)


@torch.no_grad()
def view_logits(net: TimeSformer, views: Tensor, chunk: int = 32, features: bool = False,
                device: torch.device | None = None) -> Tensor:
    """Per-view logits (or pre-head features) of views (V, C, T, H, W), ``chunk`` views a pass
    (on ``device``, default the views')."""
    forward = net.forward_features if features else net
    return torch.cat([forward(part.to(device) if device is not None else part) for part in views.split(chunk)])


def device_of(name: str | None) -> torch.device:
    """``name`` as a device; None: CUDA when available, else CPU."""
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


#: 0.2's name of :class:`TorchModel` (``dna_video.analysis.inference.LoadedModel``), kept one release.
LoadedModel = TorchModel


def WindowNetwork(model: TorchModel, device: str | None = None, attention: bool = False) -> TorchModel:  # noqa: N802
    """0.2's ``dna_video.analysis.window_network.WindowNetwork(model, device, attention)``, kept one
    release: the model itself runs windows now; this is :meth:`TorchModel.using`."""
    return model.using(device, attention)
