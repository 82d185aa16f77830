"""LightningModule for image classification with a DnA ViT (the paper's ViT-B/16 result):
loss (soft targets from MixUp / CutMix, label smoothing), top-1/top-5, AdamW with a cosine
schedule and linear warm-up (timm's ``CosineLRScheduler``, stepped per epoch), around timm's
``VisionTransformer`` with our attention (:mod:`dna_video.models.vit`).

Command line: ``dna-video fit --config imagenet_vit_b`` (the config names this task).
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from dna_video.checkpoints import load_image_checkpoint
from dna_video.common.defaults import IMG_SIZE
from dna_video.models.attention import DEFAULT_ATTENTION, negative_branch_weights
from dna_video.models.vit import vision_transformer
from dna_video.tasks.base import TaskModule

__all__ = ["ImageClassifier"]

# The reference's ImageNet recipe (dna.md): AdamW lr 1e-3, weight decay 0.075.
RECIPE_OPTIMIZER = {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3, "weight_decay": 0.075}}


class ImageClassifier(TaskModule):
    """Image classification with timm's ViT and our attention in every block.

    Args:
        num_classes: number of classes (linked from the DataModule by the CLI).
        img_size: input side (linked from the DataModule).
        arch: ViT preset (``vit_tiny_patch16_224``, ``vit_small_patch16_224``,
            ``vit_base_patch16_224``) or ``custom`` (geometry in ``net_kwargs``).
        attention: attention kind of every block (a registered kind).
        attention_kwargs: extra arguments of the attention kind (e.g. ``{alpha_init: 0.5}``).
        net_kwargs: other ``timm VisionTransformer`` arguments (e.g. ``{patch_size: 8, depth: 4}``).
        drop_path_rate: stochastic depth (0.15 in the recipe).
        label_smoothing: cross-entropy label smoothing (0.1 in the recipe).
        optimizer: optimiser; default AdamW lr 1e-3, weight decay 0.075.
        warmup_epochs: linear warm-up epochs of the cosine schedule (5 in the recipe).
        min_lr: the cosine schedule's final learning rate (1e-5 in the recipe).
        warmup_lr: learning rate at the start of warm-up.
        init_from: an image checkpoint to start from (timm ViT, DnA-ViT with separate or fused
            ``qqkvv`` projections): positions resampled, head re-initialised for another
            class count, DnA's Q-/V- by ``dna_init`` when absent; see
            :func:`dna_video.checkpoints.load_image_checkpoint`.
        dna_init: DnA's Q-, V- when ``init_from`` has none: ``random``, ``scaled_copy``, ``orthogonal``.
    """

    init_source_key = "init_from"

    def __init__(
        self,
        num_classes: int,
        img_size: int = IMG_SIZE,
        arch: str = "vit_base_patch16_224",
        attention: str = DEFAULT_ATTENTION,
        attention_kwargs: dict[str, Any] | None = None,
        net_kwargs: dict[str, Any] | None = None,
        drop_path_rate: float = 0.15,
        label_smoothing: float = 0.1,
        optimizer: OptimizerCallable = RECIPE_OPTIMIZER,  # type: ignore[assignment]
        warmup_epochs: int = 5,
        min_lr: float = 1e-5,
        warmup_lr: float = 1e-6,
        init_from: str | None = None,
        dna_init: str = "random",
    ) -> None:
        super().__init__(optimizer)
        self.save_plain_hyperparameters()
        self.net = vision_transformer(
            arch, attention=attention, attention_kwargs=attention_kwargs, num_classes=num_classes,
            img_size=img_size, drop_path_rate=drop_path_rate, **(net_kwargs or {}),
        )
        self.init_report = load_image_checkpoint(self.net, init_from, dna_init=dna_init) if init_from else None
        self.label_smoothing = label_smoothing
        self.train_top1 = MulticlassAccuracy(num_classes, average="micro")
        metrics = MetricCollection({
            "top1": MulticlassAccuracy(num_classes, average="micro"),
            "top5": MulticlassAccuracy(num_classes, top_k=min(5, num_classes), average="micro"),
        })
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")

    def forward(self, images: Tensor) -> Tensor:
        return self.net(images)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, target = batch
        logits = self(images)
        # MixUp / CutMix give (B, K) class probabilities; label smoothing applies to both forms.
        loss = F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)
        hard = target.argmax(-1) if target.ndim == 2 else target
        self.train_top1(logits, hard)
        self.log("train/loss", loss, prog_bar=True, batch_size=images.shape[0])
        self.log("train/top1", self.train_top1, on_step=False, on_epoch=True, batch_size=images.shape[0])
        return loss

    def _eval_step(self, batch: tuple[Tensor, Tensor], stage: str, metrics: MetricCollection) -> None:
        images, target = batch
        logits = self(images)
        self.log(f"{stage}/loss", F.cross_entropy(logits, target), batch_size=images.shape[0])
        metrics.update(logits, target)
        self.log_dict(metrics, batch_size=images.shape[0], prog_bar=stage == "val")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val", self.val_metrics)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test", self.test_metrics)

    def on_train_epoch_end(self) -> None:
        # The negative branch's weight of each attention module that has one (DnA's alpha, mean over heads).
        for name, weight in negative_branch_weights(self.net).items():
            self.log(f"alpha/{name}", weight.detach().float().mean())

    def configure_optimizers(self) -> Any:
        from timm.scheduler import CosineLRScheduler

        optimizer = self.optimizer(self.parameters())
        epochs = self.trainer.max_epochs if self.trainer and self.trainer.max_epochs and self.trainer.max_epochs > 0 else 300
        scheduler = CosineLRScheduler(
            optimizer, t_initial=epochs, lr_min=self.hparams.min_lr, warmup_t=self.hparams.warmup_epochs,
            warmup_lr_init=self.hparams.warmup_lr, warmup_prefix=False, t_in_epochs=True,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}

    def lr_scheduler_step(self, scheduler: Any, metric: Any = None) -> None:
        # timm schedulers take the epoch that starts next.
        scheduler.step(epoch=self.current_epoch + 1)
