"""Reading checkpoint files of every supported container into one flat state dict.

Containers: PyTorch pickles (``.pth``, ``.pyth``, ``.bin``, ``.pt``, Lightning ``.ckpt``),
``.safetensors`` files, and Hugging Face ``save_pretrained`` folders (``config.json`` plus
``model.safetensors`` / ``pytorch_model.bin``, sharded or not). Wrappers are peeled off in
one place: the official TimeSformer's ``model_state``, Lightning's ``state_dict``, DeiT/MAE
style ``model``, DDP's ``module``, and key prefixes shared by every key (``module.``,
``model.``, ``net.``, ``_orig_mod.``).

What the keys *mean* (which layout) is decided in :mod:`.layouts`.
"""

from __future__ import annotations

import json
import logging
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dna_video.checkpoints.errors import CheckpointError
from dna_video.checkpoints.sources import resolve_source
from dna_video.checkpoints.upgrade import FORMAT_KEY, upgrade_checkpoint

log = logging.getLogger(__name__)

__all__ = ["CheckpointError", "RawCheckpoint", "read_checkpoint", "unwrap_state_dict"]

# Where checkpoints keep their weights, in the order they are looked for.
CONTAINER_KEYS = ("model_state", "state_dict", "model", "module")
# Prefixes added by wrappers (DDP, the official `model.` attribute, our LightningModule's
# `net.`, torch.compile); stripped when EVERY key carries them.
WRAPPER_PREFIXES = ("module.", "model.", "net.", "_orig_mod.")
HF_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


@dataclass
class RawCheckpoint:
    """A checkpoint's tensors under their stored names (wrappers removed), and what the file
    says about itself.

    Attributes:
        path: where it was read from ("<state dict>" when built in memory).
        container: the file kind, for the loading report.
        state_dict: name -> tensor, wrappers and shared prefixes removed.
        hf_config: the Hugging Face ``config.json`` when there is one.
        hparams: a Lightning checkpoint's ``hyper_parameters``.
        notes: what was peeled off (e.g. ``model_state``, prefix ``model.``).
    """

    path: str
    container: str
    state_dict: dict[str, Tensor]
    hf_config: dict[str, Any] | None = None
    hparams: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def _is_state_dict(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and len(obj) > 0
        and all(isinstance(k, str) for k in obj)
        and all(isinstance(v, Tensor) for v in obj.values())
    )


def unwrap_state_dict(obj: Any, notes: list[str] | None = None, where: str = "checkpoint") -> dict[str, Tensor]:
    """The flat ``name -> tensor`` dict inside ``obj`` (a loaded checkpoint), with wrapper
    containers and prefixes shared by all keys removed. ``notes`` collects what was removed."""
    notes = notes if notes is not None else []
    if isinstance(obj, nn.Module):
        notes.append("pickled module")
        obj = obj.state_dict()
    while not _is_state_dict(obj):
        if not isinstance(obj, dict):
            raise CheckpointError(f"{where}: holds a {type(obj).__name__}, not a state dict of tensors")
        inner = next((k for k in CONTAINER_KEYS if isinstance(obj.get(k), dict) and obj[k]), None)
        if inner is None:
            tensors = [k for k, v in obj.items() if isinstance(v, Tensor)]
            if tensors:
                # A state dict with some non-tensor entries (e.g. a saved step counter).
                notes.append(f"ignored {len(obj) - len(tensors)} non-tensor entries")
                obj = {k: obj[k] for k in tensors}
                break
            raise CheckpointError(
                f"{where}: no state dict found; top-level keys {sorted(map(str, obj))[:12]}, "
                f"looked for tensors directly or under {', '.join(CONTAINER_KEYS)}"
            )
        notes.append(f"weights under '{inner}'")
        obj = obj[inner]
    state = dict(obj)
    stripped = True
    while stripped:
        stripped = False
        for prefix in WRAPPER_PREFIXES:
            if all(k.startswith(prefix) for k in state):
                state = {k[len(prefix):]: v for k, v in state.items()}
                notes.append(f"prefix '{prefix}' removed")
                stripped = True
    return state


def load_torch_file(path: Path, weights_only: bool | None) -> Any:
    def fail(e: BaseException) -> CheckpointError:
        return CheckpointError(f"{path}: not a PyTorch checkpoint ({type(e).__name__}: {e})")

    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only is not False)
    except pickle.UnpicklingError as e:
        if weights_only is not None or "Weights only load failed" not in str(e):
            raise fail(e) from None
        # Files that pickle Python objects beside the tensors (old training scripts save their
        # argparse Namespace): load them fully, which runs code from the file.
        log.warning("%s holds Python objects besides tensors; loading it with weights_only=False "
                    "(only do this for files you trust)", path)
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e2:  # noqa: BLE001 - any failure here means "not a checkpoint"
            raise fail(e2) from None
    except Exception as e:  # noqa: BLE001 - the unpickler raises many kinds on foreign files
        raise fail(e) from None


def _safetensors_load(path: Path) -> dict[str, Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a safetensors file ({e})") from None


def _read_weights(path: Path, weights_only: bool | None) -> Any:
    if path.suffix == ".safetensors":
        return _safetensors_load(path)
    if path.name.endswith(".index.json"):
        # Sharded Hugging Face weights: {"weight_map": {name: shard file}}.
        index = json.loads(path.read_text())
        state: dict[str, Tensor] = {}
        for shard in sorted(set(index["weight_map"].values())):
            shard_state = _read_weights(path.parent / shard, weights_only)
            state.update(unwrap_state_dict(shard_state, where=str(path.parent / shard)))
        return state
    return load_torch_file(path, weights_only)


def _hf_config_beside(path: Path) -> dict[str, Any] | None:
    config = path / "config.json" if path.is_dir() else path.parent / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{config}: not valid JSON ({e})") from None
    return data if data.get("model_type") == "timesformer" else None


def read_checkpoint(path: str | Path, weights_only: bool | None = None) -> RawCheckpoint:
    """Read ``path`` (a checkpoint file or a Hugging Face folder) into a :class:`RawCheckpoint`.

    ``path`` may also be a Hugging Face Hub id or a URL, fetched once into its cache
    (:func:`.sources.resolve_source`).

    ``weights_only``: ``None`` loads pickles safely and falls back to a full load, with a
    warning, for files that pickle other Python objects; ``True`` never falls back.

    Raises:
        FileNotFoundError: nothing at ``path``.
        CheckpointError: the file is not a checkpoint, or holds no state dict.
    """
    path = resolve_source(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    hf_config = _hf_config_beside(path)
    if path.is_dir():
        weights = next((path / f for f in HF_WEIGHT_FILES if (path / f).is_file()), None)
        if weights is None or not (path / "config.json").is_file():
            raise CheckpointError(
                f"{path}: a folder, but not a Hugging Face save_pretrained folder "
                f"(needs config.json and one of {', '.join(HF_WEIGHT_FILES)})"
            )
        if hf_config is None:
            raise CheckpointError(f"{path / 'config.json'}: model_type is not 'timesformer'")
        container = f"Hugging Face folder ({weights.name})"
    else:
        weights = path
        container = {
            ".safetensors": "safetensors",
            ".ckpt": "Lightning checkpoint",
            ".pyth": "TimeSformer .pyth",
        }.get(path.suffix, f"PyTorch file ({path.suffix or 'no suffix'})")
    obj = _read_weights(weights, weights_only)
    hparams = None
    if isinstance(obj, dict) and "pytorch-lightning_version" in obj:
        container = f"Lightning checkpoint (lightning {obj['pytorch-lightning_version']})"
        # In the current format (a 0.1 checkpoint's options renamed; dna_video.checkpoints.upgrade).
        hparams = dict(upgrade_checkpoint({"hyper_parameters": dict(obj.get("hyper_parameters") or {}),
                                           FORMAT_KEY: obj.get(FORMAT_KEY, 1)})["hyper_parameters"]) or None
    notes: list[str] = []
    if hparams is not None and any(k.startswith("net.") for k in obj["state_dict"]):
        # This project's VideoClassifier: the network is `net`. (Checkpoints written before
        # the module stopped registering it twice also hold a `_forward.` copy.)
        obj = {k: v for k, v in obj["state_dict"].items() if k.startswith("net.")}
        notes.append("network weights under 'state_dict' / 'net.'")
    state = unwrap_state_dict(obj, notes, where=str(path))
    return RawCheckpoint(str(path), container, state, hf_config=hf_config, hparams=hparams, notes=notes)
