"""LightningModule: loss, metrics, multi-view evaluation and optimisation around a TimeSformer.

The network (:class:`~dna_video.models.timesformer.TimeSformer`) knows nothing of Lightning; this
module builds it from typed arguments (so LightningCLI turns them into YAML and ``--help``),
steps it, evaluates the views of each video and optimises it. Its argument defaults are the
paper's fine-tuning recipe (dna.md). Fine-tuning: ``init.source`` imports a checkpoint of any
supported layout (:mod:`dna_video.checkpoints`) adapted to this module's class count, frame
count and resolution; ``freeze_backbone`` and ``backbone_lr_mult`` choose what trains and how
fast. Side jobs (unreadable-video accounting, throughput, prediction files) are callbacks in
:mod:`dna_video.training.callbacks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from dna_video.checkpoints import LoadReport, PretrainedWeights, load_weights
from dna_video.common.defaults import IMG_SIZE, NUM_FRAMES
from dna_video.models.attention import negative_branch_weights
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.base import TaskModule
from dna_video.tasks.metrics import MeanClassAccuracy
from dna_video.tasks.views import aggregate_views, mean_view_probs

__all__ = ["VideoClassifier", "Schedule", "Evaluation"]

# The paper's fine-tuning recipe (dna.md): SGD lr 0.005, momentum 0.9, wd 1e-4, 15 epochs,
# lr x0.1 at epoch 11 and x0.01 at epoch 14. Given as class_path specs so that LightningCLI
# prints them and a YAML file can change any field.
PAPER_OPTIMIZER = {
    "class_path": "torch.optim.SGD",
    "init_args": {"lr": 0.005, "momentum": 0.9, "weight_decay": 1e-4},
}
PAPER_LR_SCHEDULER = {
    "class_path": "torch.optim.lr_scheduler.MultiStepLR",
    "init_args": {"milestones": [11, 14], "gamma": 0.1},
}


@dataclass
class Schedule:
    """How the learning rate moves besides the optimiser's own value.

    Args:
        interval: step the ``lr_scheduler`` every ``epoch`` or every ``step``.
        monitor: the metric a ``ReduceLROnPlateau`` schedule follows.
        warmup_steps: linear LR warm-up over this many optimiser steps, on top of the schedule.
    """

    interval: Literal["epoch", "step"] = "epoch"
    monitor: str = "val/loss"
    warmup_steps: int = 0


@dataclass
class Evaluation:
    """How the evaluation views of a video become one prediction.

    Args:
        view_aggregation: how the views are combined into the score the metrics rank and the
            predicted class: ``sum``, ``mean`` or ``max``.
        aggregate: combine view ``logits`` or softmax ``probs``; reported probabilities are
            those of the mean view (softmax of the mean logits, or the mean probabilities).
        chunk_size: views per forward pass (bounds memory for many views).
    """

    view_aggregation: Literal["sum", "mean", "max"] = "sum"
    aggregate: Literal["logits", "probs"] = "logits"
    chunk_size: int = 32


def _group(kind: type, value: Any) -> Any:
    """A grouped option from itself, a dict of its fields (hyper-parameters as saved) or None."""
    if value is None:
        return kind()
    return value if isinstance(value, kind) else kind(**value)


class VideoClassifier(TaskModule):
    """Video classification with a divided space-time TimeSformer (DnA or softmax attention).

    Reads as build (:meth:`build_network`), step (:meth:`training_step`), evaluate
    (:meth:`evaluate`, every view of a video) and optimise (:meth:`configure_optimizers`).

    Args:
        num_classes: number of classes (from the DataModule).
        num_frames: frames per clip (from the DataModule).
        img_size: input side (from the DataModule's crop size).
        network: the TimeSformer: preset, attention kinds and what differs from the preset
            (:class:`~dna_video.models.timesformer.TimeSformerSpec`, e.g. ``{arch: tiny,
            attention: dna, depth: 2}``).
        init: where the weights start (:class:`~dna_video.checkpoints.PretrainedWeights`:
            ``source`` a checkpoint of any supported layout, adapted to this model, and how;
            ``pair_seed`` the paired initialisation, ``docs/variants.md``, "Paired runs").
        freeze_backbone: train only the head (linear probe); the frozen backbone runs in eval
            mode (no dropout or drop-path).
        backbone_lr_mult: learning rate of every parameter but the head, as a multiple of the
            optimiser's (e.g. 0.1 when fine-tuning); the head gets the optimiser's own.
        label_smoothing: cross-entropy label smoothing.
        optimizer: optimiser; default the paper's SGD (lr 0.005, momentum 0.9, wd 1e-4).
        lr_scheduler: LR schedule; default MultiStepLR x0.1 at epochs 11 and 14. null: none.
        schedule: the schedule's interval and monitor, and LR warm-up (:class:`Schedule`).
        evaluation: how the views of a video are combined (:class:`Evaluation`).

    ``pair_seed`` was an argument of its own before 0.3: ``model.pair_seed`` is read as
    ``model.init.pair_seed`` with a warning until 0.4 (:mod:`dna_video.checkpoints.upgrade`).
    """

    init_source_key = "init.source"

    def __init__(
        self,
        num_classes: int,
        num_frames: int = NUM_FRAMES,
        img_size: int = IMG_SIZE,
        network: TimeSformerSpec = TimeSformerSpec(),  # defaults: read, never changed
        init: PretrainedWeights = PretrainedWeights(),
        freeze_backbone: bool = False,
        backbone_lr_mult: float = 1.0,
        label_smoothing: float = 0.0,
        optimizer: OptimizerCallable = PAPER_OPTIMIZER,  # type: ignore[assignment]
        lr_scheduler: LRSchedulerCallable | None = PAPER_LR_SCHEDULER,  # type: ignore[assignment]
        schedule: Schedule = Schedule(),
        evaluation: Evaluation = Evaluation(),
    ) -> None:
        super().__init__(optimizer, lr_scheduler)
        if backbone_lr_mult < 0:
            raise ValueError(f"backbone_lr_mult must be >= 0, got {backbone_lr_mult}")
        self.save_plain_hyperparameters()
        self.network = TimeSformerSpec.of(network)
        self.init = _group(PretrainedWeights, init)
        self.schedule = _group(Schedule, schedule)
        self.evaluation = _group(Evaluation, evaluation)
        self.init_report: LoadReport | None = None
        self.net = self.build_network(num_classes, num_frames, img_size)

        self.train_top1 = MulticlassAccuracy(num_classes, average="micro")
        eval_metrics = MetricCollection(
            {
                "top1": MulticlassAccuracy(num_classes, average="micro"),
                "top5": MulticlassAccuracy(num_classes, top_k=min(5, num_classes), average="micro"),
                "mca": MeanClassAccuracy(num_classes),
            }
        )
        self.val_metrics = eval_metrics.clone(prefix="val/")
        self.test_metrics = eval_metrics.clone(prefix="test/")
        # The evaluation loss as a metric: under DDP its epoch value is the mean over every
        # process's views, weighted by their number (a logged scalar would be rank 0's).
        self.eval_loss = torch.nn.ModuleDict({"val": MeanMetric(), "test": MeanMetric()})

    # -- build ---------------------------------------------------------------------------------
    def build_network(self, num_classes: int, num_frames: int, img_size: int) -> torch.nn.Module:
        """The TimeSformer of :attr:`network`, its weights from :attr:`init`, the backbone
        frozen when ``freeze_backbone``. A subclass builds its own network here."""
        net = self.network.build(num_classes, num_frames, img_size, pair_seed=self.init.pair_seed)
        self.init_report = load_weights(net, self.init)
        if self.hparams.freeze_backbone:
            net.requires_grad_(False)
            net.head.requires_grad_(True)
        return net

    def forward(self, video: Tensor) -> Tensor:
        """(B, C, T, H, W) -> logits (B, num_classes)."""
        return self.net(video)

    def train(self, mode: bool = True) -> "VideoClassifier":
        super().train(mode)
        if mode and self.hparams.get("freeze_backbone"):
            # A linear probe reads fixed features: no dropout or drop-path in the backbone.
            self.net.eval()
            self.net.head_drop.train()
            self.net.head.train()
        return self

    def on_train_start(self) -> None:
        # Lightning does not call train() when fitting starts: it keeps each submodule's mode
        # as it finds it (and restores that mode after each validation), so the frozen
        # backbone's eval mode is applied once here.
        if self.hparams.freeze_backbone:
            self.train()

    # -- step ----------------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        video, target = batch["video"], batch["label"]
        logits = self(video)
        loss = F.cross_entropy(logits, target, label_smoothing=self.hparams.label_smoothing)
        self.train_top1(logits, target)
        videos = video.shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=videos)
        self.log("train/top1", self.train_top1, on_step=False, on_epoch=True, batch_size=videos)
        return loss

    def on_train_epoch_end(self) -> None:
        # The negative branch's weight of each attention module that has one (DnA's alpha, mean over heads).
        for name, weight in negative_branch_weights(self.net).items():
            self.log(f"alpha/{name}", weight.detach().float().mean())

    # -- evaluate (every view of a video) ------------------------------------------------------
    def view_logits(self, views: Tensor) -> Tensor:
        """(B, V, C, T, H, W) -> per-view logits (B, V, K), at most ``eval_chunk_size`` views
        per forward pass."""
        flat = rearrange(views, "b v c t h w -> (b v) c t h w")
        logits = torch.cat([self(chunk) for chunk in flat.split(self.evaluation.chunk_size)])
        return rearrange(logits, "(b v) k -> b v k", b=views.shape[0])

    def evaluate(self, batch: dict, metrics: MetricCollection | None = None) -> dict | None:
        """Per video of an evaluation batch: ``path``, ``label`` (None when unknown),
        ``probs`` (:func:`mean_view_probs`) and ``pred`` (the class the metrics count, from
        :func:`aggregate_views`). With ``metrics``: also the loss over every view and the
        metrics, logged under their prefix. None when every video of the batch failed."""
        if batch["video"] is None:
            return None
        logits = self.view_logits(batch["video"])
        how, on = self.evaluation.view_aggregation, self.evaluation.aggregate
        scores = aggregate_views(logits, how, on)
        target = batch.get("label")
        if metrics is not None:
            videos, views = logits.shape[:2]
            loss = F.cross_entropy(rearrange(logits, "b v k -> (b v) k"), repeat(target, "b -> (b v)", v=views))
            metrics.update(scores, target)
            stage = metrics.prefix.rstrip("/")
            self.eval_loss[stage].update(loss, weight=videos * views)
            self.log(f"{stage}/loss", self.eval_loss[stage], batch_size=videos)
            self.log_dict(metrics, batch_size=videos, prog_bar=stage == "val")
        return {"path": batch.get("path"), "label": target, "probs": mean_view_probs(logits, on), "pred": scores.argmax(-1)}

    def validation_step(self, batch: dict, batch_idx: int) -> dict | None:
        return self.evaluate(batch, self.val_metrics)

    def test_step(self, batch: dict, batch_idx: int) -> dict | None:
        return self.evaluate(batch, self.test_metrics)

    def predict_step(self, batch: dict, batch_idx: int) -> dict | None:
        return self.evaluate(batch)

    # -- optimise --------------------------------------------------------------------------------
    def param_groups(self) -> list[dict[str, Any]]:
        """Trainable parameters as optimiser groups: ``backbone`` (everything but the head, lr
        multiplier ``backbone_lr_mult``) and ``head``. Frozen parameters are left out."""
        head_ids = {id(p) for p in self.net.head.parameters()}
        head, backbone = [], []
        for p in self.parameters():
            if p.requires_grad:
                (head if id(p) in head_ids else backbone).append(p)
        groups = [
            {"params": backbone, "name": "backbone", "lr_mult": self.hparams.backbone_lr_mult},
            {"params": head, "name": "head", "lr_mult": 1.0},
        ]
        return [g for g in groups if g["params"]]

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer(self.param_groups())
        # Scale before the schedule is built, so that it records the scaled lrs as its base.
        for group in optimizer.param_groups:
            group["lr"] *= group.get("lr_mult", 1.0)
        if self.lr_scheduler is None:
            return optimizer
        scheduler = self.lr_scheduler(optimizer)
        config = {"scheduler": scheduler, "interval": self.schedule.interval}
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            config["monitor"] = self.schedule.monitor
        return {"optimizer": optimizer, "lr_scheduler": config}

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        # Warm-up scales the learning rate only for the step itself and restores it after,
        # so the schedule's own state (often computed from the current lr) is untouched.
        warmup = self.schedule.warmup_steps
        scale = min(1.0, (self.trainer.global_step + 1) / warmup) if warmup else 1.0
        groups = optimizer.param_groups
        scheduled = [g["lr"] for g in groups]
        for g in groups:
            g["lr"] *= scale
        try:
            optimizer.step(closure=optimizer_closure)
        finally:
            for g, lr in zip(groups, scheduled):
                g["lr"] = lr
