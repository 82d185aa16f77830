"""Stop training on a non-finite loss or gradient before it reaches the weights."""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor

log = logging.getLogger(__name__)

__all__ = ["NonFiniteError", "NonFiniteGuard"]


class NonFiniteError(RuntimeError):
    """Training diverged: a loss, gradient, validation loss or weight is NaN or infinite."""


class NonFiniteGuard(Callback):
    """Check the loss (and the gradient norm) of every training step before the optimiser
    step. A non-finite value stops training with :class:`NonFiniteError` naming the epoch,
    the step and the videos of the batch, after ``max_skipped_batches`` such batches were
    skipped (their gradients dropped, so the optimiser leaves the weights as they are). A
    checkpoint holding a non-finite weight is never written, and a non-finite validation loss stops
    training before the epoch's checkpoints are saved: the last good checkpoint stays.

    Args:
        max_skipped_batches: bad batches to skip (with a warning) before stopping; 0: stop at
            the first.
        check_grad_norm: also check the gradient norm (a finite loss can still give
            infinite gradients, which clipping turns into NaN weights).
    """

    def __init__(self, max_skipped_batches: int = 0, check_grad_norm: bool = True) -> None:
        if max_skipped_batches < 0:
            raise ValueError(f"max_skipped_batches must be >= 0, got {max_skipped_batches}")
        self.max_skipped_batches = max_skipped_batches
        self.check_grad_norm = check_grad_norm
        self.skipped: list[str] = []  # one description per skipped batch
        self._loss: Tensor | None = None
        self._paths: list[str] = []
        self._batch_idx = -1

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        self._loss = None
        self._batch_idx = batch_idx
        paths = batch.get("path", []) if isinstance(batch, dict) else []
        self._paths = [str(p) for p in paths]

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Tensor) -> None:
        self._loss = loss.detach()

    def _problem(self, optimizer: torch.optim.Optimizer) -> str | None:
        if self._loss is not None and not torch.isfinite(self._loss).all():
            return f"loss {self._loss.float().mean().item()}"
        if self.check_grad_norm:
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            if grads:
                norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
                if not torch.isfinite(norm):
                    return f"gradient norm {norm.item()}"
        return None

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer) -> None:
        problem = self._problem(optimizer)
        # Every rank takes the same decision (one bad rank would otherwise stop alone and hang the others).
        if not trainer.strategy.reduce_boolean_decision(problem is not None, all=False):
            return
        where = f"epoch {trainer.current_epoch}, step {trainer.global_step} (batch {self._batch_idx})"
        videos = ", ".join(self._paths) if self._paths else "(batch without paths)"
        what = problem or "a non-finite loss or gradient on another process"
        if len(self.skipped) < self.max_skipped_batches:
            self.skipped.append(f"{where}: {what}")
            log.warning("non-finite %s at %s: batch skipped (%d/%d); videos: %s", what, where,
                        len(self.skipped), self.max_skipped_batches, videos)
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None  # optimisers leave parameters without a gradient untouched
            return
        raise NonFiniteError(
            f"training diverged: non-finite {what} at {where}; videos of the batch: {videos}. "
            f"{len(self.skipped)} bad batch(es) skipped before (callback max_skipped_batches). "
            "The weights of this step were not updated and no checkpoint was written from them: "
            f"{_last_checkpoint(trainer)}. Lower the learning rate (model.optimizer.init_args.lr), "
            "add warm-up (model.schedule.warmup_steps) or clip gradients (trainer.gradient_clip_val)"
        )

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Validation inside fit (trainer.training is False while it runs), not a `validate` command.
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        loss = trainer.callback_metrics.get("val/loss")
        if loss is not None and not torch.isfinite(loss).all():
            raise NonFiniteError(
                f"validation loss is {loss.float().mean().item()} after epoch {trainer.current_epoch} (step "
                f"{trainer.global_step}): the network's outputs are not finite. No checkpoint of this epoch "
                f"was written; {_last_checkpoint(trainer)}"
            )

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        bad = [name for name, t in checkpoint.get("state_dict", {}).items()
               if torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all()]
        if bad:
            raise NonFiniteError(
                f"refusing to write a checkpoint with non-finite weights ({len(bad)} tensors, e.g. "
                f"{', '.join(bad[:3])}) at epoch {trainer.current_epoch}, step {trainer.global_step}; "
                f"{_last_checkpoint(trainer)}"
            )

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": list(self.skipped)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = list(state_dict.get("skipped", []))


def _last_checkpoint(trainer: L.Trainer) -> str:
    """Where the last good checkpoint is, for the error message."""
    for callback in trainer.checkpoint_callbacks:
        path = getattr(callback, "last_model_path", "") or ""
        if not path and getattr(callback, "monitor", "x") is None:
            path = getattr(callback, "best_model_path", "") or ""
        if path:
            return f"the last good checkpoint is {path}"
    return "no checkpoint was written before"
