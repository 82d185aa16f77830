"""The registry of runs: every ``fit`` records its run (logger, experiment name, logger version,
log and checkpoint folders) as one line of ``runs.jsonl`` in the logger's ``save_dir``;
``--ckpt_path last`` finds the newest recorded run of the same experiment that has a
``last.ckpt`` (:func:`find_latest_run`), and an evaluation finds the run a checkpoint belongs to
(:func:`run_of_checkpoint`). Plain JSON lines: no torch, no Lightning. Pointing a logger at a
run, and the checks before a command writes, are the command line's
(:mod:`dna_video.training.runs`)."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "REGISTRY",
    "FOLDER_LOGGERS",
    "NAME_ARGUMENT",
    "RestoreError",
    "Experiment",
    "RunRecord",
    "plain_config",
    "record_run",
    "read_records",
    "find_latest_run",
    "run_of_checkpoint",
]

REGISTRY = "runs.jsonl"

# The argument that names the experiment, per logger class (its last name); "name" for the others.
NAME_ARGUMENT = {"MLFlowLogger": "experiment_name", "WandbLogger": "project"}
# Loggers whose runs are folders `<save_dir>/<name>/<version>`: the ones a run folder is claimed for.
FOLDER_LOGGERS = ("TensorBoardLogger", "CSVLogger")


class RestoreError(ValueError):
    """A checkpoint that cannot be used as asked (not a checkpoint, no run to continue, or
    options that change the network it holds)."""


def plain_config(value: Any) -> Any:
    """Config values (jsonargparse Namespaces, tuples) as plain dicts / lists to compare."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, dict):
        return {k: plain_config(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_config(v) for v in value]
    return value


@dataclass(frozen=True)
class Experiment:
    """What identifies an experiment across runs: the logger class, where it stores its runs
    and the experiment's name."""

    logger: str  # class name, e.g. TensorBoardLogger
    save_dir: str  # absolute
    name: str

    @property
    def registry(self) -> Path:
        return Path(self.save_dir) / REGISTRY

    @classmethod
    def from_logger_config(cls, logger: Any, default_root_dir: str | None) -> "Experiment | None":
        """From ``trainer.logger`` as LightningCLI parsed it (a class_path spec, or a list of
        them: the first counts). None for no logger or Lightning's implicit one."""
        if isinstance(logger, (list, tuple)):
            logger = logger[0] if logger else None
        spec = plain_config(logger)
        if not isinstance(spec, dict) or "class_path" not in spec:
            return None
        kind = spec["class_path"].rsplit(".", 1)[-1]
        args = spec.get("init_args") or {}
        save_dir = args.get("save_dir") or default_root_dir or os.getcwd()
        name = args.get(NAME_ARGUMENT.get(kind, "name")) or "lightning_logs"
        return cls(kind, os.path.abspath(str(save_dir)), str(name))


@dataclass(frozen=True)
class RunRecord:
    """One line of ``runs.jsonl``: a ``fit`` of an experiment."""

    run_id: str
    logger: str
    name: str
    version: str
    log_dir: str
    checkpoint_dir: str
    started: str

    @property
    def last_checkpoint(self) -> Path:
        return Path(self.checkpoint_dir) / "last.ckpt"


def record_run(experiment: Experiment, version: Any, log_dir: str | None, checkpoint_dir: str | None) -> RunRecord:
    """Append this run to the experiment's registry (one JSON line: appends of one short line
    do not interleave)."""
    record = RunRecord(
        run_id=uuid.uuid4().hex,
        logger=experiment.logger,
        name=experiment.name,
        version=str(version),
        log_dir=os.path.abspath(log_dir) if log_dir else "",
        checkpoint_dir=os.path.abspath(checkpoint_dir) if checkpoint_dir else "",
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    experiment.registry.parent.mkdir(parents=True, exist_ok=True)
    with open(experiment.registry, "a") as f:
        f.write(json.dumps(asdict(record)) + "\n")
    return record


def read_records(experiment: Experiment) -> list[RunRecord]:
    """The recorded runs of ``experiment``, oldest first (lines of other experiments, of another
    version of this file or cut by a kill are left out)."""
    if not experiment.registry.is_file():
        return []
    records = []
    for line in experiment.registry.read_text().splitlines():
        try:
            fields = json.loads(line)
            records.append(RunRecord(**fields))
        except (ValueError, TypeError):
            continue  # a line from another version of this file, or cut by a kill
    return [r for r in records if r.logger == experiment.logger and r.name == experiment.name]


def find_latest_run(experiment: Experiment) -> RunRecord:
    """The newest recorded run of ``experiment`` with a ``last.ckpt``, or an error saying
    where it looked."""
    records = read_records(experiment)
    for record in reversed(records):
        if record.last_checkpoint.is_file():
            return record
    seen = f"{len(records)} recorded run(s), none with a last.ckpt" if records else "no recorded run"
    raise RestoreError(
        f"--ckpt_path last: {seen} of experiment {experiment.name!r} ({experiment.logger}) in "
        f"{experiment.registry}. Check trainer.logger's save_dir and name (they must be the run's), "
        "or give the checkpoint's path"
    )


def run_of_checkpoint(experiment: Experiment | None, checkpoint: str | os.PathLike) -> str | None:
    """The logger version of the run that wrote ``checkpoint``: the newest recorded run whose
    checkpoint folder holds it, else, for TensorBoard / CSV loggers, the ``<save_dir>/<name>/
    <version>/checkpoints/`` layout. None when the checkpoint belongs to no run of ``experiment``."""
    if experiment is None:
        return None
    folder = Path(checkpoint).resolve().parent
    for record in reversed(read_records(experiment)):
        if record.checkpoint_dir and Path(record.checkpoint_dir).resolve() == folder:
            return record.version
    if experiment.logger in FOLDER_LOGGERS and folder.name == "checkpoints":
        run_dir = folder.parent
        if run_dir.parent.resolve() == (Path(experiment.save_dir) / experiment.name).resolve():
            return run_dir.name.removeprefix("version_") if run_dir.name.removeprefix("version_").isdigit() else run_dir.name
    return None
