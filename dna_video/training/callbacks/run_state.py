"""What a run needs to be found and continued: its record in the experiment's registry, its
random-number state in every checkpoint, and a checkpoint when the cluster asks it to stop."""

from __future__ import annotations

import logging
import os
import random
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from dna_video.runs.registry import Experiment, record_run

log = logging.getLogger(__name__)

__all__ = ["RunState"]


def _rng_states() -> dict[str, Any]:
    """Global generators as tensors and plain data (checkpoints load with weights_only=True)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, python_state, python_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": {"version": version, "state": list(python_state), "gauss": python_gauss},
    }


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])
    n = states["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = states["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


class RunState(Callback):
    """Record the run at the start of ``fit`` (:func:`dna_video.runs.registry.record_run`, so that
    ``--ckpt_path last`` finds it); keep the global random generators in every checkpoint and
    restore them when a fit resumes, so the data order and augmentations continue as if the
    run had not stopped; on SIGTERM (a cluster's warning before it kills or requeues a job,
    turned by Lightning into a stop at the end of the current batch) write ``last.ckpt``
    before exiting.

    Args:
        experiment: the experiment whose registry records this run; None: not recorded.
    """

    def __init__(self, experiment: Experiment | None = None) -> None:
        self.experiment = experiment
        self._restored_rng: dict[str, Any] | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.experiment is not None and trainer.logger is not None and trainer.is_global_zero:
            checkpoint_dir = next((c.dirpath for c in trainer.checkpoint_callbacks if c.dirpath), None)
            record_run(self.experiment, trainer.logger.version, trainer.log_dir, checkpoint_dir)
        # Restored here, the last hook before the training data loader draws its order
        # (restoring the loops and the sanity check, which isolates its randomness, come between).
        if self._restored_rng is not None:
            _set_rng_states(self._restored_rng)
            self._restored_rng = None

    def state_dict(self) -> dict[str, Any]:
        return {"rng": _rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored_rng = state_dict.get("rng")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or not trainer.training:
            return
        last = next((c for c in trainer.checkpoint_callbacks
                     if isinstance(c, ModelCheckpoint) and c.monitor is None and c.dirpath), None)
        if last is None:
            log.warning("SIGTERM: checkpointing is off, nothing saved")
            return
        path = os.path.join(last.dirpath, "last.ckpt")
        trainer.save_checkpoint(path)
        log.warning("SIGTERM at epoch %d, step %d: saved %s; continue with --ckpt_path last",
                    trainer.current_epoch, trainer.global_step, path)

