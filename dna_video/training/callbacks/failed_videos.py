"""Unreadable and short videos: counted per stage and named in one warning per epoch.

The data pipeline never stops on a file it cannot decode: in training the sample is replaced
by another video, in evaluation it is left out of the metrics (:mod:`dna_video.data.dataset`),
each file logged once in one line saying what it is (``empty file (0 bytes)``, ``not a
video (...)``). Each batch says how many files that was (``failed``) and which
(``failed_paths``); this callback logs ``{train,val,test}/failed_videos`` (a sum per epoch)
and, at the end of every epoch that met some, warns once:

    val epoch 3: 2 unreadable video(s), left out of the metrics: a.mp4, b.mp4

A video shorter than the clip is sampled with frames repeated (``short_video``); the batches
list such videos (``short_videos``) and each epoch that met some warns once with their count:

    train epoch 0: 3 videos shorter than the clip (225 frames needed): frames repeated: a.mp4 (90 frames), ...
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L

from dna_video.data.sampling import short_videos_note

log = logging.getLogger(__name__)

__all__ = ["FailedVideoMonitor"]


class FailedVideoMonitor(L.Callback):
    """Count and name the unreadable and the short videos of each stage (see the module
    docstring). Enabled by default in the CLI.

    Args:
        max_named: how many paths a warning names (the count is always complete).
    """

    def __init__(self, max_named: int = 5) -> None:
        self.max_named = max_named
        self._paths: dict[str, list[str]] = {}  # stage -> unreadable files met this epoch
        self._short: dict[str, list[tuple[str, int, int]]] = {}  # stage -> (path, frames, needed) this epoch

    def _record(self, pl_module: L.LightningModule, stage: str, batch: Any) -> None:
        if not isinstance(batch, dict) or "failed" not in batch:
            return
        self._paths.setdefault(stage, []).extend(batch.get("failed_paths", []))
        self._short.setdefault(stage, []).extend(batch.get("short_videos", []))
        if stage != "predict":  # Lightning logs nothing in predict
            pl_module.log(f"{stage}/failed_videos", float(batch["failed"]), reduce_fx="sum",
                          on_step=False, on_epoch=True, batch_size=1, sync_dist=True)

    def _report(self, trainer: L.Trainer, stage: str) -> None:
        if short := self._short.pop(stage, []):
            log.warning("%s epoch %d: %s", stage, trainer.current_epoch, short_videos_note(short, self.max_named))
        paths = self._paths.pop(stage, [])
        if not paths:
            return
        what = "replaced by other videos" if stage == "train" else "left out of the metrics"
        named = ", ".join(paths[: self.max_named])
        if len(paths) > self.max_named:
            named += f" (+{len(paths) - self.max_named} more)"
        log.warning("%s epoch %d: %d unreadable video(s), %s: %s", stage, trainer.current_epoch, len(paths), what, named)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._record(pl_module, "train", batch)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if not trainer.sanity_checking:
            self._record(pl_module, "val", batch)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._record(pl_module, "test", batch)

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._record(pl_module, "predict", batch)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._report(trainer, "train")

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self._report(trainer, "val")

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._report(trainer, "test")

    def on_predict_epoch_end(self, trainer, pl_module) -> None:
        self._report(trainer, "predict")
