"""What every task module shares: its hyper-parameters and class names in checkpoints (in the
current format), the optimiser and scheduler callables, and the upgrade of older checkpoints."""

from __future__ import annotations

import copy
import importlib
import inspect
import io
from dataclasses import asdict, is_dataclass
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

from dna_video.checkpoints.upgrade import FORMAT_KEY, FORMAT_VERSION, upgrade_checkpoint

__all__ = ["TaskModule", "as_callable"]


def as_callable(spec: Any) -> Any:
    """A ``{class_path, init_args}`` spec (what LightningCLI parses) as a callable, so a module
    also works when built directly in Python; callables (and None) pass through."""
    if not isinstance(spec, dict):
        return spec
    module, _, name = spec["class_path"].rpartition(".")
    return partial(getattr(importlib.import_module(module), name), **spec.get("init_args", {}))


class TaskModule(L.LightningModule):
    """Base of the task modules.

    * ``optimizer`` / ``lr_scheduler``: callables (LightningCLI's ``OptimizerCallable``) or
      ``{class_path, init_args}`` specs; kept out of the hyper-parameters (LightningCLI saves
      their specs in ``config.yaml``).
    * Checkpoints carry the format version (:mod:`dna_video.checkpoints.upgrade`), the class
      names of the data the model was trained on (predictions and reports need no dataset),
      and, for a model initialised from another checkpoint, that checkpoint's name as
      ``initialised_from`` (restoring does not read it again).
    * :meth:`load_from_checkpoint` upgrades a checkpoint of an older format first.
    """

    # Read by Lightning's ThroughputMonitor for FLOPs/s (it warns when absent); not measured.
    flops_per_batch: int | None = None

    def __init__(self, optimizer: OptimizerCallable, lr_scheduler: LRSchedulerCallable | None = None) -> None:
        super().__init__()
        self.optimizer = as_callable(optimizer)
        self.lr_scheduler = as_callable(lr_scheduler)

    def save_plain_hyperparameters(self) -> None:
        """``save_hyperparameters`` of the arguments of the outermost constructor (the class
        built, not the base classes it calls), grouped options (dataclasses) stored as plain
        dicts so checkpoints load with ``weights_only``."""
        frame = inspect.currentframe().f_back
        while (frame.f_back is not None and frame.f_back.f_code.co_name == "__init__"
               and frame.f_back.f_locals.get("self") is self):
            frame = frame.f_back
        # Only that frame: its f_back is the caller, not another constructor of this module.
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"], frame=frame)
        for key, value in list(self.hparams.items()):
            if is_dataclass(value):
                self.hparams[key] = asdict(value)
        self._hparams_initial = copy.deepcopy(self._hparams)

    #: The hyper-parameter path of the checkpoint a model was initialised from ("group.field").
    init_source_key: str | None = None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[FORMAT_KEY] = FORMAT_VERSION
        hparams = checkpoint.get("hyper_parameters")
        if hparams and self.init_source_key:
            group, _, field = self.init_source_key.rpartition(".")
            holder = hparams.get(group) if group else hparams
            if isinstance(holder, dict) and holder.get(field):
                # The saved weights already hold the import: restoring (load_from_checkpoint, or
                # --ckpt_path, which re-applies these hyper-parameters) must not read it again.
                # A copy of the group: the checkpoint's dict shares it with the module's hparams.
                checkpoint["initialised_from"] = holder[field]
                holder = {**holder, field: None}
                if group:
                    hparams[group] = holder
                else:
                    checkpoint["hyper_parameters"] = holder
        names = getattr(self._trainer and self._trainer.datamodule, "class_names", None)
        if names:
            checkpoint["class_names"] = list(names)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any):  # type: ignore[override]
        """Lightning's ``load_from_checkpoint``, with a checkpoint of an older format upgraded first."""
        if isinstance(checkpoint_path, (str, Path)):
            checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
            if checkpoint.get(FORMAT_KEY, 1) < FORMAT_VERSION:
                buffer = io.BytesIO()
                torch.save(upgrade_checkpoint(checkpoint), buffer)
                buffer.seek(0)
                checkpoint_path = buffer
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)
