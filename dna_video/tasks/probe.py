"""LightningModule of the probe classifier (:class:`~dna_video.models.probe.ProbeClassifier`).

:class:`ProbeClassifierModule` is a :class:`~dna_video.tasks.video.VideoClassifier` that builds
another network: the backbone TimeSformer from ``network`` with its weights from ``init`` (any
checkpoint layout the importer reads), frozen and wrapped by the probes. Loss, metrics,
multi-view evaluation, optimisation and checkpoints are the VideoClassifier's; a checkpoint
holds the backbone too, so it restores without the backbone's file.

``dna-video fit --config probe_quickstart`` trains it (the config names this class).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

from dna_video.checkpoints import CheckpointError, PretrainedWeights, load_weights
from dna_video.common.defaults import IMG_SIZE, NUM_FRAMES
from dna_video.models.attention import DEFAULT_ATTENTION
from dna_video.models.probe import ProbeClassifier
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.video import PAPER_LR_SCHEDULER, PAPER_OPTIMIZER, Evaluation, Schedule, VideoClassifier, _group

__all__ = ["ProbeClassifierModule", "ProbeOptions"]


@dataclass
class ProbeOptions:
    """The probes (VisCoP's integration of DnA).

    Args:
        num_probes: learned probe tokens (16 in VisCoP).
        layers: backbone blocks the probes read, 0-based, negative from the end (e.g.
            ``[-4, -3, -2, -1]``); null: every block.
        cross_attention: cross-attention of the interaction modules: an attention kind with a
            cross-attention (``dna``, ``softmax``, or any kind registered with a ``cross``
            class, ``docs/variants.md``).
        interaction: ``replace`` (the cross-attention output replaces the probes, VisCoP) or
            ``residual`` (added to them, then a residual MLP).
        init_from_backbone: start each interaction module from the matching block's spatial
            attention, norm1 (and MLP); false: fresh trunc-normal weights.
        neg_init: DnA's Q-, V- of the interaction modules: ``scaled_copy`` (eps * Q+, eps * V+,
            as VisCoP), ``random``, ``orthogonal``, or ``copy`` (a DnA backbone's own Q-, V-, alpha).
        neg_init_eps: eps of ``scaled_copy`` (1e-4 in VisCoP).
        alpha_init: initial alpha of the DnA cross-attentions.
    """

    num_probes: int = 16
    layers: list[int] | None = None
    cross_attention: str = DEFAULT_ATTENTION
    interaction: Literal["replace", "residual"] = "replace"
    init_from_backbone: bool = True
    neg_init: Literal["scaled_copy", "random", "orthogonal", "copy"] = "scaled_copy"
    neg_init_eps: float = 1e-4
    alpha_init: float = 0.5


class ProbeClassifierModule(VideoClassifier):
    """Video classification by learned probes over a frozen TimeSformer.

    Only the probes, their interaction modules and the head train. The backbone is the
    TimeSformer of ``network``, imported from ``init.source``: state the checkpoint's geometry
    there (``dna-video checkpoints inspect FILE`` prints it). An import that leaves checkpoint
    tensors unused (other than the head) is refused: the frozen backbone would not be the
    checkpoint's model. ``network.head_dropout`` applies before the probe's head.

    Args:
        num_classes: number of classes (from the DataModule).
        num_frames: frames per clip (from the DataModule).
        img_size: input side (from the DataModule's crop size).
        network: the backbone TimeSformer (:class:`~dna_video.models.timesformer.TimeSformerSpec`).
        init: the backbone's weights (:class:`~dna_video.checkpoints.PretrainedWeights`; its
            ``pair_seed`` pairs the backbone's initialisation).
        probe: the probes (:class:`ProbeOptions`).
        label_smoothing: cross-entropy label smoothing.
        optimizer: optimiser of the probes, interaction modules and head.
        lr_scheduler: LR schedule. null: none.
        schedule: the schedule's interval and monitor, and LR warm-up.
        evaluation: how the views of a video are combined.
    """

    def __init__(
        self,
        num_classes: int,
        num_frames: int = NUM_FRAMES,
        img_size: int = IMG_SIZE,
        network: TimeSformerSpec = TimeSformerSpec(),
        init: PretrainedWeights = PretrainedWeights(),
        probe: ProbeOptions = ProbeOptions(),
        label_smoothing: float = 0.0,
        optimizer: OptimizerCallable = PAPER_OPTIMIZER,  # type: ignore[assignment]
        lr_scheduler: LRSchedulerCallable | None = PAPER_LR_SCHEDULER,  # type: ignore[assignment]
        schedule: Schedule = Schedule(),
        evaluation: Evaluation = Evaluation(),
    ) -> None:
        if TimeSformerSpec.of(network).grad_checkpointing:
            raise ValueError("model.network.grad_checkpointing: the probe's backbone runs without gradients; remove it")
        # Read by build_network, which the VideoClassifier's constructor calls.
        self.probe_options = _group(ProbeOptions, probe)
        super().__init__(num_classes, num_frames, img_size, network, init, label_smoothing=label_smoothing,
                         optimizer=optimizer, lr_scheduler=lr_scheduler, schedule=schedule, evaluation=evaluation)

    def build_network(self, num_classes: int, num_frames: int, img_size: int) -> torch.nn.Module:
        """The backbone (built and imported as the VideoClassifier's network), frozen inside the probes."""
        backbone = replace(self.network, compile=False).build(num_classes, num_frames, img_size,
                                                              pair_seed=self.init.pair_seed)
        report = self.init_report = load_weights(backbone, self.init)
        if report is not None:
            unused = {k: v for k, v in report.unused.items() if not k.startswith("head.")}
            if unused:
                shown = "\n  ".join(f"{k}: {v}" for k, v in list(unused.items())[:8])
                raise CheckpointError(
                    f"{report.source}: {len(unused)} tensors of the backbone checkpoint are not used by "
                    f"the model built from model.network, so the frozen backbone would not be the "
                    f"checkpoint's model:\n  {shown}\nSet model.network to the checkpoint's geometry "
                    "(dna-video checkpoints inspect FILE shows it)."
                )
        backbone.reset_head(0)  # the probe has its own head
        options = self.probe_options
        net = ProbeClassifier(
            backbone, num_classes, num_probes=options.num_probes, layers=options.layers,
            cross_attention=options.cross_attention, interaction=options.interaction,
            init_from_backbone=options.init_from_backbone, neg_init=options.neg_init,
            neg_init_eps=options.neg_init_eps, alpha_init=options.alpha_init, head_dropout=self.network.head_dropout,
        )
        if self.network.compile:
            net.compile()
        return net

    def on_train_start(self) -> None:
        self.train()  # the backbone's eval mode, whatever mode Lightning found the modules in

    def param_groups(self) -> list[dict]:
        """One optimiser group: the probes, interaction modules, final norm and head (the
        frozen backbone is left out)."""
        return [{"params": [p for p in self.parameters() if p.requires_grad], "name": "probe", "lr_mult": 1.0}]
