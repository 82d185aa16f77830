"""LightningCLI for dna-video: ``fit``, ``validate``, ``test``, ``predict`` from YAML configs.

* The DataModule's class count and clip geometry are linked to the model, so a config never
  states them twice.
* Run defaults (the paper's 15 epochs on one device, seed 0, TensorBoard logs in ``runs/``,
  test after fit) are stated here once; the model's and the DataModules' argument defaults
  hold the rest of the recipe, so an experiment config states only its own (dataset,
  protocol, monitor, run name). ``--print_config`` shows everything.
* Checkpoints: the best by a configurable metric (``checkpoint.*``) and ``last.ckpt`` after
  every epoch; a rich progress bar; the full config saved beside each run's logs.
* Callbacks (:mod:`dna_video.callbacks`): unreadable videos counted and named, clips/s
  (Lightning's ThroughputMonitor), data-wait share and peak memory per epoch, and in
  ``predict`` one row per video in ``predictions.csv`` in the run folder.
* ``fit --test_after_fit true`` (the default) tests the best checkpoint right after training,
  in the same process.
"""

from __future__ import annotations

import logging
import os
from typing import Any

# jsonargparse >= 4.49 makes lightning's CLI print deprecation warnings; set before import.
os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar, ThroughputMonitor
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from .callbacks.failed_videos import FailedVideoMonitor
from .callbacks.predictions import PredictionWriter
from .callbacks.run_summary import RunSummary
from .callbacks.throughput import DataWaitMonitor, videos_in_batch
from .data import listfile, ntu, smarthome, synthetic  # noqa: F401  (DataModules known by their short names)
from .data.datamodule import VideoDataModule
from .module import VideoClassifier

# What every run does unless its config says otherwise; the recipe's 15 epochs among them.
RUN_DEFAULTS = {
    "max_epochs": 15,
    "devices": 1,
    "log_every_n_steps": 50,
    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "runs"}},
}


class DnACLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.init_args.num_frames", "model.num_frames")
        parser.link_arguments("data.init_args.crop_size", "model.img_size")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/top1",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best-{epoch:02d}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=True,
            help="After fit, test the best checkpoint (fit subcommand only).",
        )

    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand, self.config) if self.subcommand else self.config
        callbacks = [
            FailedVideoMonitor(),  # {stage}/failed_videos and one warning per epoch naming them
            PredictionWriter(),  # acts only in `predict`: one CSV row per video
            # clips/s as train/device/samples_per_sec, a mean over the last 20 steps
            ThroughputMonitor(batch_size_fn=videos_in_batch, window_size=20),
            DataWaitMonitor(),  # data-wait share, peak memory and the epoch's clips/s
            RunSummary(),  # summary.json in the run folder: best / last checkpoint, test metrics, clips/s
        ]
        if config.trainer.get("enable_checkpointing") is not False:
            # `last.ckpt` after every epoch, for resuming: lightning 2.6's save_last only
            # writes it when the monitored checkpoint is written too, so it gets a callback of
            # its own.
            callbacks.append(ModelCheckpoint(filename="last", monitor=None, save_top_k=1, enable_version_counter=False))
        # A rich progress bar unless the config turns progress bars off (Lightning refuses both).
        if config.trainer.get("enable_progress_bar") is not False:
            callbacks.append(RichProgressBar())
        self.trainer_defaults = {**self.trainer_defaults, "callbacks": callbacks}

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Trainer:
        if config.get("enable_checkpointing") is False:
            # Lightning refuses ModelCheckpoint callbacks with checkpointing off: drop `checkpoint.*`.
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        return super()._instantiate_trainer(config, callbacks)

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit"):
            ckpt = "best" if self.trainer.checkpoint_callback and self.trainer.checkpoint_callback.best_model_path else None
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt)


def _show_info_logs() -> None:
    """Print dna_video's INFO messages (dataset summaries at setup, unreadable videos,
    checkpoint import reports) unless the application configured logging itself; without a
    handler Python drops them."""
    logger = logging.getLogger("dna_video")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def main(args: list[str] | None = None, run: bool = True) -> DnACLI:
    _show_info_logs()
    return DnACLI(
        VideoClassifier,
        VideoDataModule,
        subclass_mode_data=True,
        seed_everything_default=0,
        trainer_defaults=RUN_DEFAULTS,
        save_config_kwargs={"overwrite": True},
        # The model owns its optimiser and schedule (model.optimizer, model.lr_scheduler).
        auto_configure_optimizers=False,
        args=args,
        run=run,
    )
