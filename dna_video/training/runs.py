"""Run identity, resume and safe checkpoint files, where they need Lightning: what keeps a
user's run recoverable. The plain-file half (the ``runs.jsonl`` registry, run folders, the
claim of ``version_N``) is :mod:`dna_video.runs`.

* ``--ckpt_path last`` continues the newest recorded run of the same experiment that has a
  ``last.ckpt`` (:func:`dna_video.runs.registry.find_latest_run`): same folder and logger
  version (TensorBoard / CSV ``version``, MLflow ``run_id``, W&B ``id``), so resuming does not
  depend on TensorBoard's ``version_N`` numbering.
* ``validate`` / ``test`` / ``predict`` with a checkpoint log into that checkpoint's run (a
  ``validate/``, ``test/`` or ``predict/`` folder inside it for TensorBoard and CSV).
* A checkpoint is read once here, with an error naming the file when it is not one, and the
  options given with it are compared to its saved hyper-parameters (:func:`compare_hparams`).
* :class:`AtomicCheckpointIO` writes a checkpoint beside its destination and renames it into
  place, so a process killed while saving leaves the previous file intact.
"""

from __future__ import annotations

import csv
import importlib
import logging
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.plugins.io import TorchCheckpointIO

from dna_video.checkpoints.upgrade import upgrade_checkpoint
from dna_video.common.atomic import atomic_path
from dna_video.runs.folders import claim_version_folder, evaluation_folder, run_files
from dna_video.runs.registry import (
    FOLDER_LOGGERS,
    Experiment,
    RestoreError,
    find_latest_run,
    plain_config,
    run_of_checkpoint,
)

log = logging.getLogger(__name__)

__all__ = [
    "AtomicCheckpointIO",
    "AtomicSaveConfig",
    "RestoreError",
    "compare_hparams",
    "claim_run_folder",
    "keep_csv_metrics",
    "read_run_checkpoint",
    "start_run",
]

# The constructor argument that names a run's version, per logger class (its last name).
VERSION_ARGUMENT = {
    "TensorBoardLogger": "version",
    "CSVLogger": "version",
    "MLFlowLogger": "run_id",
    "WandbLogger": "id",
}
# Hyper-parameters that change the network's shape or computation: restoring a checkpoint
# with a different value would fail to load, or silently run the checkpoint's network.
NETWORK_HPARAMS = (
    "num_classes", "num_frames", "img_size", "network.arch", "network.attention", "network.temporal_attention",
    "network.spatial_attention", "network.attention_kwargs", "network.embed_dim", "network.depth",
    "network.num_heads", "network.patch_size", "network.mlp_ratio", "network.qkv_bias", "network.in_chans",
)
# Hyper-parameters a restore is expected to differ in: the checkpoint's weights already hold
# the import of ``init.source`` (TaskModule.on_save_checkpoint clears it).
IGNORED_HPARAMS = ("init.source", "init_from")
# Grouped options, compared field by field.
_GROUPS = ("network", "init", "schedule", "evaluation", "probe")


# -- checkpoints ------------------------------------------------------------------------


def read_run_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint at ``path`` (on the CPU, tensors and plain data only), or a
    :class:`RestoreError` naming the file and what it is."""
    path = Path(path)
    if not path.is_file():
        raise RestoreError(f"checkpoint {path} does not exist (or is not a file)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch's unpickling errors do not name the file
        size = path.stat().st_size
        kind = "an empty file" if size == 0 else (
            "a zip file that is not a torch checkpoint" if zipfile.is_zipfile(path)
            else f"not a torch checkpoint ({size} bytes; {type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
        )
        raise RestoreError(
            f"{path} is {kind}. --ckpt_path takes a .ckpt written by this project's fit "
            "(e.g. <run>/checkpoints/last.ckpt); to start from other weights use --model.init.source"
        ) from exc
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        keys = sorted(checkpoint)[:5] if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise RestoreError(
            f"{path} is a torch file but not a Lightning checkpoint (no 'state_dict'; it holds {keys}). "
            "To start from these weights use --model.init.source instead of --ckpt_path"
        )
    return checkpoint


def _flat(options: dict[str, Any]) -> dict[str, Any]:
    """Grouped options as dotted keys (``network.depth``); the others as they are."""
    out = {}
    for key, value in options.items():
        if key in _GROUPS and isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def compare_hparams(given: dict[str, Any], saved: dict[str, Any], checkpoint: str,
                    sources: dict[str, str] | None = None, data_inputs: dict[str, str] | None = None) -> list[str]:
    """Compare the model options of a command (``given``) with a checkpoint's saved
    hyper-parameters. Raises :class:`RestoreError` listing every option that changes the
    network; returns one warning per other option that differs (the checkpoint's value is the
    one used).

    ``sources`` (:func:`dna_video.training.parser.option_sources`): where the command set
    each option; an option it did not set is a default, which the checkpoint's value replaces
    without a word. ``data_inputs``: model options the data fixes (``MODEL_INPUTS``), which
    always count: the data would feed the network clips of another shape."""
    given, saved = _flat(plain_config(given)), _flat(plain_config(saved))
    data_inputs = data_inputs or {}
    network, others = [], []
    for key, saved_value in saved.items():
        if key in IGNORED_HPARAMS or key.startswith("_") or key not in given:
            continue
        if key == "num_classes" and given[key] is None:
            continue  # set from the data when the classes are built
        value = plain_config(given[key])
        saved_value = plain_config(saved_value)
        empty = (None, {}, [])
        if value == saved_value or (value in empty and saved_value in empty):
            continue
        origin = ""
        if key in data_inputs:
            data_key = data_inputs[key]
            where = (sources or {}).get(f"data.{data_key}")
            origin = f" (from data.init_args.{data_key}, " + (_set_in(where) if where else "its default") + ")"
        elif sources is not None:
            if f"model.{key}" not in sources:
                continue  # a default the user never gave: the checkpoint's value replaces it
            origin = f" ({_set_in(sources[f'model.{key}'])})"
        line = f"model.{key}: given {value!r}{origin}, the checkpoint has {saved_value!r}"
        (network if key in NETWORK_HPARAMS else others).append(line)
    if network:
        raise RestoreError(
            f"{checkpoint} holds a different network than the options ask for:\n  " + "\n  ".join(network)
            + "\nDrop these options where they are set (the checkpoint's values apply), or to train a new "
            "network from these weights use --model.init.source instead of --ckpt_path"
        )
    return [f"{line}; the checkpoint's value is used (see the run's config.yaml)" for line in others]


def _set_in(source: str) -> str:
    return "set on the command line" if source == "the command line" else f"set in {source}"


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into a temporary file in the destination folder, flushed to disk, then
    renamed over the destination: a reader (or a resume after a kill) sees the old file or the
    new one, never half of one. (Lightning's own save goes through a temporary file in the
    system temp folder, whose final move is a copy when that is another file system.)
    Remote paths are left to Lightning."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        fs = get_filesystem(path)
        if type(fs).__name__ != "LocalFileSystem":
            return super().save_checkpoint(checkpoint, path, storage_options)
        with atomic_path(path, fsync=True) as partial:
            torch.save(checkpoint, partial)


class AtomicSaveConfig(SaveConfigCallback):
    """The run's ``config.yaml``, written whole (:mod:`dna_video.common.atomic`): Lightning's
    callback writes it in place. A run reaching this point owns its folder (the CLI claimed it
    or was told to overwrite it), so an existing file is replaced."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        log_dir = trainer.log_dir  # a broadcast under DDP: every rank asks
        if trainer.is_global_zero and self.save_to_log_dir and log_dir is not None:
            if type(get_filesystem(log_dir)).__name__ != "LocalFileSystem":
                return super().setup(trainer, pl_module, stage)
            with atomic_path(Path(log_dir) / self.config_filename) as partial:
                # Parsing validated the config; validating again on save is most of its cost.
                self.parser.save(self.config, str(partial), skip_none=False, skip_validation=True, overwrite=True,
                                 multifile=self.multifile)
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


# -- run identity -----------------------------------------------------------------------


def set_logger_version(logger: Any, version: str, subfolder: str | None = None) -> None:
    """Point ``trainer.logger`` (as parsed by LightningCLI) at an existing run; for the
    folder-based loggers (TensorBoard, CSV) optionally at a ``subfolder`` of it, where an
    evaluation logs without touching the training's files (a CSVLogger rewrites the
    ``metrics.csv`` of the folder it opens)."""
    if isinstance(logger, (list, tuple)):
        logger = logger[0]
    kind = logger.class_path.rsplit(".", 1)[-1]
    argument = VERSION_ARGUMENT.get(kind)
    if argument is None:
        raise RestoreError(f"cannot continue a run of logger {kind}: it is not one of {sorted(VERSION_ARGUMENT)}")
    value: Any = version
    if kind in ("TensorBoardLogger", "CSVLogger"):
        # They take an int version as the folder version_<int>, a string as the folder's name.
        folder = f"version_{version}" if version.isdigit() else version
        value = f"{folder}/{subfolder}" if subfolder else (int(version) if version.isdigit() else folder)
    logger.init_args[argument] = value


def _is_rank_zero() -> bool:
    """From the launcher's environment: ``Trainer.global_rank`` is set only once a run starts."""
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0 and os.environ.get("NODE_RANK", "0") == "0"


def claim_run_folder(logger: Any) -> Path:
    """Give a folder logger (TensorBoard, CSV) without a version the next free ``version_N``,
    claimed by creating the folder (:func:`dna_video.runs.folders.claim_version_folder`: two
    runs started together never share a folder; the logger's own numbering only lists folders)."""
    folder, number = claim_version_folder(logger.root_dir)
    logger._version = number  # the loggers have no setter; `version` reads this once set
    return folder


def start_run(loggers: list[Any], subcommand: str, ckpt_path: str | None, overwrite: bool) -> None:
    """Before a command writes anything: each folder logger without a version gets a folder of
    its own (:func:`claim_run_folder`); a ``fit`` into a folder that already holds a run needs
    ``overwrite``, unless it resumes a checkpoint of that run. Other loggers keep their own
    run identities (MLflow, W&B)."""
    if not _is_rank_zero():
        return
    for logger in loggers:
        if type(logger).__name__ not in FOLDER_LOGGERS:
            continue
        if logger._version is None:
            folder = claim_run_folder(logger)
            log.info("%s: run folder %s", subcommand, folder)
            continue
        if subcommand != "fit":
            continue  # an evaluation's own folder inside a run (<run>/<command>/), replaced each time
        folder = Path(logger.log_dir)
        held = run_files(folder)
        resuming = bool(ckpt_path) and Path(ckpt_path).resolve().parent.parent == folder.resolve()
        if not held or resuming:
            continue
        if not overwrite:
            raise RestoreError(
                f"run folder {folder} already holds a run ({', '.join(held[:4])}{', ...' if len(held) > 4 else ''}): "
                "pass --overwrite true to write over it, --ckpt_path last to continue it, or leave "
                "trainer.logger's version unset for a new folder"
            )
        log.warning("--overwrite: fit writes over the run in %s (%d files there are replaced as it writes)",
                    folder, len(held))


def keep_csv_metrics(logger: Any) -> None:
    """A CSVLogger opening an existing run folder deletes its ``metrics.csv``: put the rows
    back and let the writer append to them (a resumed run continues its metrics file)."""
    if getattr(logger, "_experiment", None) is not None:
        return  # already opened
    path = Path(logger.log_dir) / "metrics.csv"
    if not path.is_file():
        return
    kept = path.read_bytes()  # as bytes: the csv module ends its lines with \r\n
    writer = logger.experiment  # deletes the file
    path.write_bytes(kept)
    header = next(csv.reader(kept.decode().splitlines()), [])
    writer.metrics_keys = list(header)


# -- the command's checkpoint -----------------------------------------------------------


def prepare_restore(config: Any, subcommand: str, sources: dict[str, str] | None = None,
                    data_inputs: dict[str, str] | None = None) -> list[str]:
    """Before LightningCLI applies a checkpoint's hyper-parameters to ``config`` (the
    subcommand's parsed config): resolve ``ckpt_path: last`` to the experiment's latest run,
    check the file is a checkpoint, refuse options that change its network, point the
    logger at the checkpoint's run (so the command continues or evaluates beside it instead
    of opening a new version). Returns the warnings for other options that differ."""
    ckpt_path = config.get("ckpt_path")
    if not ckpt_path or ckpt_path in ("best", "hpc", "registry") or str(ckpt_path).startswith("registry:"):
        return []
    logger = config.trainer.get("logger")
    experiment = Experiment.from_logger_config(logger, config.trainer.get("default_root_dir"))
    version = None
    if ckpt_path == "last":
        if subcommand != "fit" and experiment is None:
            return []  # Lightning's own meaning: the last checkpoint of this trainer
        if experiment is None:
            raise RestoreError(
                "--ckpt_path last finds the latest run through trainer.logger's save_dir and name: "
                "set a logger (as the configs in configs/ do), or give the checkpoint's path"
            )
        record = find_latest_run(experiment)
        config.ckpt_path = ckpt_path = str(record.last_checkpoint)
        version = record.version
        log.info("--ckpt_path last: continuing %s (run %s, %s)", record.log_dir, version, ckpt_path)
    checkpoint = upgrade_checkpoint(read_run_checkpoint(ckpt_path))
    given = config.model.get("init_args", config.model) if hasattr(config.model, "get") else config.model
    warnings = compare_hparams(given, checkpoint.get("hyper_parameters") or {}, str(ckpt_path), sources, data_inputs)
    if version is None:
        version = run_of_checkpoint(experiment, ckpt_path)
    if version is not None:
        set_logger_version(logger, version, None if subcommand == "fit" else subcommand)
    elif subcommand != "fit" and logger:
        run = evaluation_folder(ckpt_path)
        if run is not None:
            _log_into(logger, run, subcommand)
    return warnings


def _log_into(logger: Any, run: Path, subfolder: str) -> None:
    """Point a folder logger (as parsed) at ``<run>/<subfolder>`` of a run outside the
    command's experiment (another name or save_dir): an evaluation lands beside the
    checkpoint it evaluates."""
    if isinstance(logger, (list, tuple)):
        logger = logger[0]
    if logger.class_path.rsplit(".", 1)[-1] not in FOLDER_LOGGERS:
        return
    logger.init_args["save_dir"] = str(run.parent.parent)
    logger.init_args["name"] = run.parent.name
    logger.init_args["version"] = f"{run.name}/{subfolder}"


# -- 0.2 names that moved to dna_video.runs.registry, kept for one release ------------------------
# (Experiment, RestoreError, find_latest_run and run_of_checkpoint are used here, so they stay
# importable from this module without a warning.)
_MOVED_TO_REGISTRY = ("REGISTRY", "NAME_ARGUMENT", "RunRecord", "record_run")


def __getattr__(name: str) -> Any:
    if name not in _MOVED_TO_REGISTRY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} moved to dna_video.runs.registry in dna-video 0.3; the old path goes in 0.4",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module("dna_video.runs.registry"), name)
