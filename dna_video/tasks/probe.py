"""LightningModule of the probe classifier (:mod:`dna_video.models.probe`) and its command line.

:class:`ProbeClassifierModule` is a :class:`~dna_video.tasks.video.VideoClassifier` whose network is
a :class:`~dna_video.models.probe.ProbeClassifier`: the backbone is built and imported exactly as the
VideoClassifier's network (``arch`` / ``net_kwargs`` / ``attention`` give its geometry,
``init_from`` any checkpoint layout the importer reads), then frozen and wrapped. Loss,
metrics, multi-view evaluation, optimisation and checkpoints are the VideoClassifier's; a
checkpoint holds the backbone too, so it restores without the backbone's file.

``python -m dna_video.models.probe fit --config configs/probe_quickstart.yaml`` runs :func:`main`.
"""

from __future__ import annotations

from typing import Any, Literal

from dna_video.checkpoints import CheckpointError
from dna_video.tasks.video import VideoClassifier
from dna_video.models.probe import ProbeClassifier

__all__ = ["ProbeClassifierModule"]


class ProbeClassifierModule(VideoClassifier):
    """Video classification by learned probes over a frozen TimeSformer.

    Only the probes, their interaction modules and the head train. The backbone is the
    TimeSformer that :class:`~dna_video.tasks.video.VideoClassifier` builds from ``arch``,
    ``net_kwargs``, ``attention`` and imports from ``init_from``: state the checkpoint's
    geometry there (``python -m dna_video.checkpoints inspect FILE`` prints it). An import that
    leaves checkpoint tensors unused (other than the head) is refused: the frozen backbone
    would not be the checkpoint's model. ``head_dropout`` applies before the probe's head.

    Args:
        num_classes: number of classes (linked from the DataModule by the CLI).
        num_frames: frames per clip (linked from the DataModule).
        img_size: input side (linked from the DataModule's crop size).
        num_probes: learned probe tokens (16 in VisCoP).
        probe_layers: backbone blocks the probes read, 0-based, negative from the end
            (e.g. ``[-4, -3, -2, -1]``); null: every block.
        cross_attention: cross-attention of the interaction modules: ``dna`` or ``softmax``.
        interaction: ``replace`` (the cross-attention output replaces the probes, VisCoP) or
            ``residual`` (added to them, then a residual MLP).
        init_probes_from_backbone: start each interaction module from the matching block's
            spatial attention, norm1 (and MLP); false: fresh trunc-normal weights.
        neg_init: DnA's Q-, V- of the interaction modules: ``scaled_copy`` (eps * Q+, eps * V+,
            as VisCoP), ``random``, ``orthogonal``, or ``copy`` (a DnA backbone's own Q-, V-, alpha).
        neg_init_eps: eps of ``scaled_copy`` (1e-4 in VisCoP).
        cross_alpha_init: initial alpha of the DnA cross-attentions.
        **kwargs: the :class:`~dna_video.tasks.video.VideoClassifier` arguments: backbone geometry
            and import (``arch``, ``attention``, ``net_kwargs``, ``init_from``, ``init_kwargs``,
            ``init_strict``), ``optimizer``, ``lr_scheduler``, ``warmup_steps``, ``head_dropout``,
            ``label_smoothing``, evaluation options.
    """

    def __init__(
        self,
        num_classes: int,
        num_frames: int = 8,
        img_size: int = 224,
        num_probes: int = 16,
        probe_layers: list[int] | None = None,
        cross_attention: Literal["dna", "softmax"] = "dna",
        interaction: Literal["replace", "residual"] = "replace",
        init_probes_from_backbone: bool = True,
        neg_init: Literal["scaled_copy", "random", "orthogonal", "copy"] = "scaled_copy",
        neg_init_eps: float = 1e-4,
        cross_alpha_init: float = 0.5,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("freeze_backbone") or kwargs.get("grad_checkpointing"):
            raise ValueError(
                "model.freeze_backbone / model.grad_checkpointing are VideoClassifier options: "
                "the probe's backbone is always frozen and runs without gradients; remove them"
            )
        super().__init__(num_classes, num_frames, img_size, **kwargs)
        report = self.init_report
        if report is not None:
            unused = {k: v for k, v in report.unused.items() if not k.startswith("head.")}
            if unused:
                shown = "\n  ".join(f"{k}: {v}" for k, v in list(unused.items())[:8])
                raise CheckpointError(
                    f"{report.source}: {len(unused)} tensors of the backbone checkpoint are not used by "
                    f"the model built from model.arch / model.net_kwargs / model.attention, so the frozen "
                    f"backbone would not be the checkpoint's model:\n  {shown}\nSet them to the "
                    "checkpoint's geometry (python -m dna_video.checkpoints inspect FILE shows it)."
                )
        backbone = self.net
        backbone.reset_head(0)  # the probe has its own head
        self.net = ProbeClassifier(
            backbone,
            num_classes,
            num_probes=num_probes,
            layers=probe_layers,
            cross_attention=cross_attention,
            interaction=interaction,
            init_from_backbone=init_probes_from_backbone,
            neg_init=neg_init,
            neg_init_eps=neg_init_eps,
            alpha_init=cross_alpha_init,
            head_dropout=self.hparams.get("head_dropout", 0.0),
        )
        if self.hparams.get("compile"):
            self.net.compile()

    def on_train_start(self) -> None:
        self.train()  # the backbone's eval mode, whatever mode Lightning found the modules in

    def param_groups(self) -> list[dict[str, Any]]:
        """One optimiser group: the probes, interaction modules, final norm and head (the
        frozen backbone is left out)."""
        return [{"params": [p for p in self.parameters() if p.requires_grad], "name": "probe", "lr_mult": 1.0}]
