"""The one LightningCLI of dna-video: ``fit``, ``validate``, ``test``, ``predict`` of every task
from YAML configs (``dna-video`` / ``python cli.py``; :mod:`dna_video.__main__` adds the tools).

* Subclass mode for model and data: the config's ``model.class_path`` chooses the task (a
  :class:`~dna_video.tasks.TaskModule`; :class:`~dna_video.tasks.VideoClassifier` by default)
  and ``data.class_path`` its DataModule.
* What the data fixes of the model (class count, clip length, input side) reaches it from the
  built DataModule, one mechanism for all: LightningCLI's ``link_arguments`` applied on
  instantiation, each DataModule saying which of its attributes gives which model argument
  (``MODEL_INPUTS``; :data:`DATA_FIXED`, docs/configs.md). A config never states them twice:
  one that states a linked model option with another value than the data's is refused.
* Run defaults (the paper's 15 epochs on one device, seed 0, TensorBoard logs in ``runs/``,
  test after fit) are stated here once; the model's and the DataModules' argument defaults
  hold the rest of the recipe, so an experiment config states only its own (dataset,
  protocol, monitor, run name). ``--print_config`` shows everything.
* Checkpoints: the best by a configurable metric (``checkpoint.*``) and ``last.ckpt`` after
  every epoch; a rich progress bar; the full config saved beside each run's logs.
* Callbacks (:mod:`dna_video.training.callbacks`): unreadable videos counted and named, clips/s
  (Lightning's ThroughputMonitor), data-wait share and peak memory per epoch, and in
  ``predict`` one row per video in ``predictions.csv`` in the run folder; in ``test``
  ``test_metrics.json``, ``test_predictions.csv`` and ``test_confusion.png`` in the run folder
  (:class:`~dna_video.training.callbacks.evaluation_report.EvaluationReportWriter`).
* ``fit --test_after_fit true`` (the default) tests the best checkpoint right after training,
  in the same process.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

# jsonargparse >= 4.49 makes lightning's CLI print deprecation warnings; set before import.
os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")

import torch
import yaml
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, RichProgressBar, ThroughputMonitor
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from dna_video.common.plugins import import_requested
from dna_video.training.callbacks.failed_videos import FailedVideoMonitor
from dna_video.training.callbacks.predictions import PredictionWriter
from dna_video.training.callbacks.run_summary import RunSummary, read_summary
from dna_video.training.callbacks.evaluation_report import EvaluationReportWriter
from dna_video.training.callbacks.throughput import DataWaitMonitor, videos_in_batch
from dna_video.data import listfile, ntu, smarthome, synthetic  # noqa: F401  (DataModules known by their short names)
from dna_video.training.callbacks.guard import NonFiniteError, NonFiniteGuard
from dna_video.training.callbacks.run_state import RunState
from dna_video.runs.summary import fit_summary
from dna_video.checkpoints.upgrade import upgrade_checkpoint
from dna_video.tasks import ImageClassifier, ProbeClassifierModule, TaskModule, VideoClassifier  # noqa: F401
from dna_video.data.images import ImageFolderDataModule, SyntheticImageFolder  # noqa: F401
from dna_video.training.configs import check_config_files, resolve_config_names, upgrade_0_1_command_line
from dna_video.training.parser import DnAParser, explain_config_error, init_arguments, is_config_dump, option_sources
from dna_video.training.runs import (
    AtomicCheckpointIO,
    AtomicSaveConfig,
    Experiment,
    keep_csv_metrics,
    prepare_restore,
    start_run,
)

#: The model arguments a DataModule may fix (what its ``MODEL_INPUTS`` maps, model argument ->
#: its attribute; a DataModule without the table fixes ``num_classes`` by its attribute of that
#: name). Each is linked from the built DataModule to the model's argument of that name when the
#: model takes one (LightningCLI's ``link_arguments``, applied on instantiation: the data's value
#: also wins over a checkpoint's hyper-parameters under ``--ckpt_path``).
DATA_FIXED = ("num_classes", "num_frames", "img_size")
_DEFAULT_INPUTS = {"num_classes": "num_classes"}


def model_inputs(data_class: type) -> dict[str, str]:
    """What ``data_class`` fixes of the model: model argument -> the DataModule attribute that
    holds it (its ``MODEL_INPUTS``)."""
    inputs = dict(getattr(data_class, "MODEL_INPUTS", _DEFAULT_INPUTS))
    unknown = sorted(set(inputs) - set(DATA_FIXED))
    if unknown:
        raise ValueError(f"{data_class.__name__}.MODEL_INPUTS names {unknown}, which the command does not link; "
                         f"it links {list(DATA_FIXED)} (dna_video.training.cli.DATA_FIXED)")
    return inputs


def _data_value(name: str, cli: "DnACLI", data: Any) -> Any:
    """The value the built DataModule ``data`` gives the model argument ``name`` (the links'
    compute function); where it fixes none, the model's own value in the config (its default,
    or what the config or a checkpoint states), which the link then leaves as it is."""
    attribute = model_inputs(type(data)).get(name)
    if attribute is not None:
        return getattr(data, attribute)
    config = cli.config[cli.config.subcommand] if cli.config.get("subcommand") else cli.config
    return (config.model.get("init_args") or {}).get(name)


# What every run does unless its config says otherwise; the recipe's 15 epochs among them.
RUN_DEFAULTS = {
    "max_epochs": 15,
    "devices": 1,
    "log_every_n_steps": 50,
    "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "runs"}},
}


class DnACLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for name in DATA_FIXED:
            # Skipped by LightningCLI where the model takes no such argument (the image task has no frames).
            parser.link_arguments("data", f"model.init_args.{name}", compute_fn=partial(_data_value, name, self),
                                  apply_on="instantiate")
        parser.set_defaults({"model": {"class_path": self.default_model}})
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(NonFiniteGuard, "nonfinite")
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
        parser.add_argument(
            "--last_every_n_steps",
            type=int,
            default=0,
            help="Also write last.ckpt every N optimiser steps (0: only at the end of each epoch), so a killed "
            "run loses at most N steps; --ckpt_path last goes on inside the epoch (docs/reliability.md).",
        )
        parser.add_argument(
            "--overwrite",
            type=bool,
            default=False,
            help="Let fit write over a run folder that already holds a run (a trainer.logger version "
            "given explicitly); without it such a fit stops before writing anything.",
        )

    def __init__(self, *args: Any, default_model: str, **kwargs: Any) -> None:
        self.default_model = default_model
        self.given_args = list(kwargs.get("args") or [])  # where each option came from, for messages
        super().__init__(*args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:
        """The subcommand the command line starts with, else all four: each one's parser costs
        about a quarter of a second to build, and a command runs one (benchmarks/README.md, "Why
        the code is the way it is"); ``--help`` without a subcommand still lists them all."""
        every = LightningCLI.subcommands()
        first = self.given_args[0] if self.given_args else None
        return {first: every[first]} if first in every else every

    def _dump_config(self) -> None:
        # Lightning dumps the parsed config to give the model its class_path hyper-parameters,
        # validating it again on the way; the parse has just validated it (the dump without
        # that check: 0.04 s instead of 0.145 s a command, benchmarks/README.md).
        if hasattr(self, "config_dump"):
            return
        dump = yaml.safe_load(self.parser.dump(self.config, skip_link_targets=False, skip_none=False,
                                               skip_validation=True, format="yaml"))
        self.config_dump = dump[self.config.subcommand] if "subcommand" in self.config else dump

    def _parse_ckpt_path(self) -> None:
        # Before the model options are replaced by the checkpoint's: `last` found by run
        # identity, the file checked, differing options reported (dna_video.training.runs).
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        sources = option_sources(self.given_args)
        known = _known_inputs(config)
        _refuse_stated_inputs(config, known, sources)  # also without a subcommand (run=False, from Python)
        if not subcommand:
            return
        # The others (the class count) are the built DataModule's: compared once it is built.
        model = config.model.get("init_args") or {}
        self.stated_inputs = {name: (model[name], sources[f"model.{name}"]) for name in DATA_FIXED
                              if name not in known and f"model.{name}" in sources and model.get(name) is not None}
        # The model options as the data will set them (the links apply on instantiation), for
        # the comparison with the checkpoint; the checkpoint's, then the links, replace them.
        model = config.model.init_args
        for name, (_, value) in known.items():
            if name in model:
                model[name] = value
        data_inputs = {name: argument for name, (argument, _) in known.items()}
        for line in prepare_restore(config, subcommand, sources, data_inputs):
            log.warning(line)
        ckpt_path = config.get("ckpt_path")
        if not ckpt_path or not Path(ckpt_path).is_file():
            return
        # As Lightning does (the checkpoint's hyper-parameters over the command line), for a
        # checkpoint of any format: upgraded first, its task class kept.
        checkpoint = upgrade_checkpoint(torch.load(ckpt_path, weights_only=True, map_location="cpu"))
        hparams = dict(checkpoint.get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        if hparams:
            class_path = hparams.pop("_class_path", None) or config.model.class_path
            self.config = self.parser.parse_object(
                {subcommand: {"model": {"class_path": class_path, "init_args": hparams}}}, self.config
            )

    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand, self.config) if self.subcommand else self.config
        experiment = Experiment.from_logger_config(config.trainer.get("logger"), config.trainer.get("default_root_dir"))
        callbacks = [
            FailedVideoMonitor(),  # {stage}/failed_videos and one warning per epoch naming them
            PredictionWriter(),  # acts only in `predict`: one CSV row per video
            # clips/s as train/device/samples_per_sec, a mean over the last 20 steps
            ThroughputMonitor(batch_size_fn=videos_in_batch, window_size=20),
            DataWaitMonitor(),  # data-wait share, peak memory and the epoch's clips/s
            RunSummary(),  # summary.json in the run folder: best / last checkpoint, test metrics, clips/s
            EvaluationReportWriter(),  # acts only in `test`: metrics JSON, predictions CSV, confusion PNG
            RunState(experiment),  # run registry, RNG state in checkpoints, checkpoint on SIGTERM
        ]
        if config.trainer.get("logger") not in (False, None) and self.subcommand == "fit":
            callbacks.append(LearningRateMonitor())  # at each step of the schedule (per epoch by default)
        if config.trainer.get("enable_checkpointing") is not False:
            # `last.ckpt` after every epoch, for resuming: lightning 2.6's save_last only
            # writes it when the monitored checkpoint is written too, so it gets a callback of
            # its own.
            callbacks.append(ModelCheckpoint(filename="last", monitor=None, save_top_k=1, enable_version_counter=False))
            if config.get("last_every_n_steps"):  # the same file, also inside epochs
                callbacks.append(ModelCheckpoint(filename="last", monitor=None, save_top_k=1, enable_version_counter=False,
                                                 every_n_train_steps=config.last_every_n_steps))
        # A rich progress bar unless the config turns progress bars off (Lightning refuses both).
        if config.trainer.get("enable_progress_bar") is not False:
            callbacks.append(RichProgressBar())
        self.trainer_defaults = {**self.trainer_defaults, "callbacks": callbacks}

    def instantiate_classes(self) -> None:
        super().instantiate_classes()
        _refuse_stated_built_inputs(getattr(self, "stated_inputs", {}), self.datamodule)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Trainer:
        if config.get("enable_checkpointing") is False:
            # Lightning refuses ModelCheckpoint callbacks with checkpointing off: drop `checkpoint.*`.
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        trainer = super()._instantiate_trainer(config, callbacks)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not one the user chose
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    def _start(self) -> None:
        """Before anything is written: the data checked (a missing root or an empty split stops
        here), then the run folder claimed (:func:`~dna_video.training.runs.start_run`)."""
        config = self.config[self.subcommand]
        check = getattr(self.datamodule, "check_inputs", None)
        if check is not None:
            check(self.subcommand)
        start_run(self.trainer.loggers, self.subcommand, config.get("ckpt_path"), bool(config.get("overwrite")))
        if self.trainer.is_global_zero:
            for logger in self.trainer.loggers:
                if isinstance(logger, CSVLogger):  # reopened by a resume or an evaluation
                    keep_csv_metrics(logger)

    def before_fit(self) -> None:
        self._start()
        if self.trainer.max_epochs == 0 or self.trainer.max_steps == 0:
            log.warning("trainer.max_epochs / max_steps is 0: nothing will be trained; validation and the test "
                        "after fit measure the model's starting weights")

    before_validate = before_test = before_predict = _start

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit"):
            # The best checkpoint's path (not "best", which makes Lightning warn about our two
            # ModelCheckpoint callbacks).
            ckpt = (self.trainer.checkpoint_callback.best_model_path or None) if self.trainer.checkpoint_callback else None
            if self.trainer.is_global_zero:  # after ddp_fork / ddp_spawn, the test's processes reopen the run's CSV
                for logger in self.trainer.loggers:
                    if isinstance(logger, CSVLogger):
                        keep_csv_metrics(logger)
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt)
        log_dir = self.trainer.log_dir  # on every rank: a broadcast under DDP
        if self.trainer.is_global_zero and log_dir:
            print(fit_summary(read_summary(log_dir)), flush=True)


log = logging.getLogger(__name__)


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


class _NoAdverts(logging.Filter):
    """Lightning's advertisements for its cloud products, printed on every run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


def _quiet_noise() -> None:
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_NoAdverts())
    # Raised inside Lightning (utilities/_pytree.py) by torch >= 2.10 on every run; nothing to act on.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    # main() hands LightningCLI the command line it rewrote (config names, 0.1 option names).
    warnings.filterwarnings("ignore", message=r"LightningCLI's args parameter is intended")
    # A CSVLogger opening a run folder again (resume, evaluation): RunState keeps its metrics.
    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")


def _known_inputs(config: Any) -> dict[str, tuple[str, Any]]:
    """The model arguments the config's DataModule fixes whose values the config already holds
    (the attribute is one of its constructor arguments: frames, crop): model argument ->
    (that data argument, its value). The others (the class count) are known once it is built."""
    data, model = config.get("data"), config.get("model")
    if not data or not model or not data.get("class_path"):
        return {}
    data_class = _import(data.class_path)
    takes = init_arguments(data_class)
    return {name: (attribute, data.init_args[attribute]) for name, attribute in model_inputs(data_class).items()
            if attribute in takes and attribute in data.init_args}


def _refuse_stated_inputs(config: Any, known: dict[str, tuple[str, Any]], sources: dict[str, str]) -> None:
    """A model option the data fixes, stated by a config file or the command line with another
    value than the data's: an error naming both places (the data's value would win silently).
    The same value is accepted: a run's saved config.yaml of 0.2 states them."""
    model = config.model.get("init_args") or {}
    clashes = []
    for name, (argument, value) in known.items():
        where = sources.get(f"model.{name}")
        if where is None or name not in model or model[name] == value:
            continue
        data_where = sources.get(f"data.{argument}")
        data_said = f"set in {data_where}" if data_where and data_where != "the command line" else (
            "set on the command line" if data_where else "its default")
        stated = "on the command line" if where == "the command line" else f"in {where}"
        clashes.append(f"model.{name} is {model[name]!r} {stated}, but the data fixes it: "
                       f"data.init_args.{argument} is {value!r} ({data_said})")
    if clashes:
        raise ValueError("; ".join(clashes) + ". Set the data's option and drop the model's (docs/configs.md, "
                         "\"What the data fixes\")")


def _refuse_stated_built_inputs(stated: dict[str, tuple[Any, str]], data: Any) -> None:
    """A model option the data fixes only once built (the class count: its class list), stated
    by a config file or the command line with another value than the built DataModule's: an
    error naming both (the link would replace it silently). Before anything is written."""
    clashes = []
    for name, (value, where) in stated.items():
        attribute = model_inputs(type(data)).get(name)
        fixed = None if attribute is None else getattr(data, attribute)
        if fixed is None or fixed == value:
            continue
        said = "on the command line" if where == "the command line" else f"in {where}"
        clashes.append(f"model.{name} is {value!r} {said}, but the data fixes it: "
                       f"{type(data).__name__}.{attribute} is {fixed!r}")
    if clashes:
        raise ValueError("; ".join(clashes) + ". Drop the model's option (docs/configs.md, \"What the data fixes\")")


def _import(class_path: str) -> type:
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def main(args: list[str] | None = None, run: bool = True, model_class: type | None = None) -> DnACLI:
    """The one command line (``python cli.py``, ``dna-video``, ``python -m dna_video``): every
    task, chosen by the config's ``model.class_path`` (default :class:`VideoClassifier`, or
    ``model_class``), and its data by ``data.class_path``. ``--import MODULE`` (any number)
    imports the user's modules first (:mod:`dna_video.common.plugins`). Options and configs in 0.1 names are
    read in their 0.2 names, with a warning (:mod:`dna_video.checkpoints.upgrade`)."""
    _show_info_logs()
    _quiet_noise()
    default = model_class or VideoClassifier
    # --import MODULE: the user's modules (an attention kind) before anything reads the options.
    args = import_requested(list(sys.argv[1:] if args is None else args))
    args = resolve_config_names(args)
    check_config_files(args)  # a file that is not YAML: one line with its line and column
    args = upgrade_0_1_command_line(args, default)
    return DnACLI(
        TaskModule,
        LightningDataModule,
        default_model=f"{default.__module__}.{default.__qualname__}",
        subclass_mode_model=True,
        subclass_mode_data=True,
        seed_everything_default=0,
        trainer_defaults=RUN_DEFAULTS,
        parser_class=DnAParser,
        save_config_callback=AtomicSaveConfig,
        save_config_kwargs={"overwrite": True},
        # The model owns its optimiser and schedule (model.optimizer, model.lr_scheduler).
        auto_configure_optimizers=False,
        args=args,
        run=run,
    )


# Errors that are the user's to fix (configuration, data, checkpoints, divergence): printed as
# one message, without a traceback, unless DNA_VIDEO_TRACEBACK=1.
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, NonFiniteError, MisconfigurationException)


def console_main(args: list[str] | None = None, model_class: type | None = None) -> None:
    """``python cli.py ...``: :func:`main`, with user errors as one line and exit status 1."""
    try:
        main(args, model_class=model_class)
    except USER_ERRORS as exc:
        if os.environ.get("DNA_VIDEO_TRACEBACK") == "1":
            raise
        # Raised while jsonargparse built the classes: the Union dump shortened to its reason.
        text = explain_config_error(str(exc)) if is_config_dump(str(exc)) else str(exc)
        sys.stderr.write(f"error: {type(exc).__name__}: {text}\n(set DNA_VIDEO_TRACEBACK=1 for the traceback)\n")
        sys.exit(1)
