"""LightningModule: loss, metrics, multi-view evaluation and optimisation around a TimeSformer.

The network (:class:`~dna_video.models.timesformer.TimeSformer`) knows nothing of Lightning; this
module builds it from typed arguments (so LightningCLI turns them into YAML and ``--help``),
steps it, evaluates the views of each video and optimises it. Its argument defaults are the
paper's fine-tuning recipe (dna.md). Fine-tuning: ``init_from`` imports a checkpoint of any
supported layout (:mod:`dna_video.checkpoints`) adapted to this module's class count, frame
count and resolution; ``freeze_backbone`` and ``backbone_lr_mult`` choose what trains and how
fast. Side jobs (unreadable-video accounting, throughput, prediction files) are callbacks in
:mod:`dna_video.training.callbacks`.
"""

from __future__ import annotations

import importlib
from functools import partial
from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from dna_video.checkpoints import LoadReport, load_pretrained
from dna_video.tasks.metrics import MeanClassAccuracy
from dna_video.models.attention import negative_branch_weights
from dna_video.models.timesformer import TimeSformer, timesformer
from dna_video.tasks.views import aggregate_views, mean_view_probs

__all__ = ["VideoClassifier"]

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


def _as_callable(spec: Any) -> Any:
    """A ``{class_path, init_args}`` spec (what LightningCLI parses) as a callable, so the
    module also works when built directly in Python; callables pass through."""
    if not isinstance(spec, dict):
        return spec
    module, _, name = spec["class_path"].rpartition(".")
    return partial(getattr(importlib.import_module(module), name), **spec.get("init_args", {}))


class VideoClassifier(L.LightningModule):
    """Video classification with a divided space-time TimeSformer (DnA or softmax attention).

    Args:
        num_classes: number of classes (linked from the DataModule by the CLI).
        num_frames: frames per clip (linked from the DataModule).
        img_size: input side (linked from the DataModule's crop size).
        arch: architecture preset: ``tiny`` (CPU tests), ``small`` (ViT-S/16), ``base`` (ViT-B/16).
        attention: attention of both the temporal and the spatial path: a registered kind
            (``dna``, ``softmax``, the paper's comparison variants; ``docs/variants.md``).
        temporal_attention: attention of the temporal path only (null: ``attention``).
        spatial_attention: attention of the spatial path only (null: ``attention``).
        attention_kwargs: extra arguments of the attention kinds in use, each kind taking its
            own (e.g. ``{alpha_init: 0.5}``).
        net_kwargs: overrides of other TimeSformer arguments (e.g. ``{depth: 6, patch_size: 8}``).
        drop_path_rate: stochastic depth at the last block (linear over depth).
        head_dropout: dropout before the classification head (0.5 in the fine-tuning recipe).
        label_smoothing: cross-entropy label smoothing.
        optimizer: optimiser; default the paper's SGD (lr 0.005, momentum 0.9, wd 1e-4).
        lr_scheduler: LR schedule; default MultiStepLR x0.1 at epochs 11 and 14. null: none.
        lr_scheduler_interval: step the schedule every ``epoch`` or every ``step``.
        lr_scheduler_monitor: the metric a ``ReduceLROnPlateau`` schedule follows.
        warmup_steps: linear LR warm-up over this many optimiser steps, on top of the schedule.
        view_aggregation: how the evaluation views of a video are combined into the score the
            metrics rank and the predicted class: ``sum``, ``mean`` or ``max``.
        aggregate: combine view ``logits`` or softmax ``probs``; reported probabilities are
            those of the mean view (softmax of the mean logits, or the mean probabilities).
        eval_chunk_size: views per forward pass in evaluation (bounds memory for many views).
        compile: ``torch.compile`` the network (not this module); the first step compiles.
        grad_checkpointing: recompute blocks in backward to save activation memory.
        init_from: checkpoint to initialise the network from, in any supported layout (timm
            ViT, official TimeSformer ``.pyth``, DnA reference or DnA-ViT, Hugging Face folder or
            state dict, this project's ``.ckpt``; a local path, a Hugging Face Hub id such as
            ``facebook/timesformer-base-finetuned-k400``, or a URL, fetched once into the
            standard cache), adapted to this model: head re-initialised
            when the class count differs, ``time_embed`` / ``pos_embed`` resampled when the frame
            count / resolution differs. Not a resume: that is ``--ckpt_path``. A checkpoint
            saved by this module does not import again when restored (its weights already
            hold the import).
        init_strict: fail unless every tensor of the network comes from ``init_from`` and every
            tensor of ``init_from`` is used.
        dna_init: DnA's Q-, V- when ``init_from`` has none: ``random`` (the reference),
            ``scaled_copy`` (eps * Q+, eps * V+) or ``orthogonal`` (V- orthogonal to V+ per head).
        init_kwargs: further options of :func:`dna_video.checkpoints.load_pretrained`, e.g.
            ``{dna_init_eps: 1e-4, negate_v_neg: false, pos_interpolation: bicubic,
            time_interpolation: linear}``.
        freeze_backbone: train only the head (linear probe); the frozen backbone runs in eval
            mode (no dropout or drop-path).
        backbone_lr_mult: learning rate of every parameter but the head, as a multiple of the
            optimiser's (e.g. 0.1 when fine-tuning); the head gets the optimiser's own.
    """

    # Read by Lightning's ThroughputMonitor for FLOPs/s (it warns when absent); not measured.
    flops_per_batch: int | None = None

    def __init__(
        self,
        num_classes: int,
        num_frames: int = 8,
        img_size: int = 224,
        arch: str = "base",
        attention: str = "dna",
        attention_kwargs: dict[str, Any] | None = None,
        temporal_attention: str | None = None,
        spatial_attention: str | None = None,
        net_kwargs: dict[str, Any] | None = None,
        drop_path_rate: float = 0.1,
        head_dropout: float = 0.5,
        label_smoothing: float = 0.0,
        optimizer: OptimizerCallable = PAPER_OPTIMIZER,  # type: ignore[assignment]
        lr_scheduler: LRSchedulerCallable | None = PAPER_LR_SCHEDULER,  # type: ignore[assignment]
        lr_scheduler_interval: Literal["epoch", "step"] = "epoch",
        lr_scheduler_monitor: str = "val/loss",
        warmup_steps: int = 0,
        view_aggregation: Literal["sum", "mean", "max"] = "sum",
        aggregate: Literal["logits", "probs"] = "logits",
        eval_chunk_size: int = 32,
        compile: bool = False,
        grad_checkpointing: bool = False,
        init_from: str | None = None,
        init_strict: bool = False,
        dna_init: Literal["random", "scaled_copy", "orthogonal"] = "random",
        init_kwargs: dict[str, Any] | None = None,
        freeze_backbone: bool = False,
        backbone_lr_mult: float = 1.0,
    ) -> None:
        super().__init__()
        if backbone_lr_mult < 0:
            raise ValueError(f"backbone_lr_mult must be >= 0, got {backbone_lr_mult}")
        # Every other argument is read back from self.hparams; the optimiser and schedule are
        # callables, not hyper-parameters (LightningCLI saves their specs in config.yaml).
        self.save_hyperparameters(ignore=["optimizer", "lr_scheduler"])
        self.optimizer = _as_callable(optimizer)
        self.lr_scheduler = _as_callable(lr_scheduler)

        # -- the network ------------------------------------------------------------------
        self.net: TimeSformer = timesformer(
            arch,
            num_classes=num_classes,
            num_frames=num_frames,
            img_size=img_size,
            attention=attention,
            attention_kwargs=attention_kwargs,
            temporal_attention=temporal_attention,
            spatial_attention=spatial_attention,
            drop_path_rate=drop_path_rate,
            head_drop_rate=head_dropout,
            grad_checkpointing=grad_checkpointing,
            **(net_kwargs or {}),
        )
        self.init_report: LoadReport | None = None
        if init_from:
            self.init_report = load_pretrained(
                self.net, init_from, strict=init_strict, dna_init=dna_init, **(init_kwargs or {})
            )
        if freeze_backbone:
            self.net.requires_grad_(False)
            self.net.head.requires_grad_(True)
        if compile:
            # In place (nn.Module.compile): parameter names and checkpoints stay unchanged.
            # (A second attribute holding the network would register it twice and store
            # every tensor twice in checkpoints.)
            self.net.compile()

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

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The saved weights already hold the import: restoring (load_from_checkpoint, or
        # --ckpt_path, which re-applies these hyper-parameters) must not read init_from again,
        # nor need the file. Where the weights came from is kept beside them.
        hparams = checkpoint.get("hyper_parameters")
        if hparams and hparams.get("init_from"):
            checkpoint["initialised_from"] = hparams["init_from"]
            hparams["init_from"] = None
        # Class names travel with the weights: predictions and reports need no dataset.
        names = getattr(self._trainer and self._trainer.datamodule, "class_names", None)
        if names:
            checkpoint["class_names"] = list(names)

    # -- training step ---------------------------------------------------------------------
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

    # -- evaluating the views of each video ------------------------------------------------
    def view_logits(self, views: Tensor) -> Tensor:
        """(B, V, C, T, H, W) -> per-view logits (B, V, K), at most ``eval_chunk_size`` views
        per forward pass."""
        flat = rearrange(views, "b v c t h w -> (b v) c t h w")
        logits = torch.cat([self(chunk) for chunk in flat.split(self.hparams.eval_chunk_size)])
        return rearrange(logits, "(b v) k -> b v k", b=views.shape[0])

    def evaluate(self, batch: dict, metrics: MetricCollection | None = None) -> dict | None:
        """Per video of an evaluation batch: ``path``, ``label`` (None when unknown),
        ``probs`` (:func:`mean_view_probs`) and ``pred`` (the class the metrics count, from
        :func:`aggregate_views`). With ``metrics``: also the loss over every view and the
        metrics, logged under their prefix. None when every video of the batch failed."""
        if batch["video"] is None:
            return None
        logits = self.view_logits(batch["video"])
        how, on = self.hparams.view_aggregation, self.hparams.aggregate
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

    # -- optimisation ----------------------------------------------------------------------
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
        config = {"scheduler": scheduler, "interval": self.hparams.lr_scheduler_interval}
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            config["monitor"] = self.hparams.lr_scheduler_monitor
        return {"optimizer": optimizer, "lr_scheduler": config}

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        # Warm-up scales the learning rate only for the step itself and restores it after,
        # so the schedule's own state (often computed from the current lr) is untouched.
        warmup = self.hparams.warmup_steps
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
