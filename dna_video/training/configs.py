"""The example configs shipped with the package, and ``--config NAME`` resolved to one of them.

``--config NAME`` (or ``-c NAME``) with a bare name that is not a file names one of the
example configs of the repository's ``configs/`` folder, shipped as the package data of
``dna_video.resources.configs``; ``dna-video configs`` lists them with their paths.
"""

from __future__ import annotations

import importlib
import logging
import re
import tempfile
from importlib.resources import files
from pathlib import Path

import yaml

__all__ = ["check_config_files", "packaged_configs", "resolve_config_names", "upgrade_0_1_command_line"]

log = logging.getLogger("dna_video.training.cli")

_CONFIG_FLAGS = ("--config", "-c")
_BARE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def packaged_configs() -> dict[str, Path]:
    """Config name (file name without ``.yaml``) -> path, for the configs shipped with the
    package; from a checkout, the repository's ``configs/`` folder (the one source)."""
    folder = files("dna_video.resources.configs")
    packaged = [p for p in folder.iterdir() if p.name.endswith(".yaml")] if folder.is_dir() else []
    if not packaged:  # a checkout: dna_video/resources/configs/ holds only a README
        packaged = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
    return {Path(p.name).stem: Path(str(p)) for p in sorted(packaged, key=lambda p: p.name)}


def _config_values(args: list[str]) -> list[tuple[int, int, str]]:
    """(index of the flag, index holding the value, value) of every ``--config VALUE`` /
    ``-c VALUE`` / ``--config=VALUE`` in ``args``."""
    found = []
    for i, arg in enumerate(args):
        flag, _, value = arg.partition("=")
        if arg in _CONFIG_FLAGS and i + 1 < len(args):
            found.append((i, i + 1, args[i + 1]))
        elif flag == "--config" and value:
            found.append((i, i, value))
    return found


def resolve_config_names(args: list[str]) -> list[str]:
    """``args`` with every ``--config NAME`` / ``-c NAME`` / ``--config=NAME`` whose value is
    not an existing file but a shipped config's name replaced by that config's path. A bare
    name that is neither stops with an error listing the shipped configs."""
    out = list(args)
    for i, position, value in _config_values(out):
        if Path(value).is_file() or not _BARE_NAME.fullmatch(value):
            continue  # a file, or inline YAML: LightningCLI reads it
        shipped = packaged_configs()
        name = value.removesuffix(".yaml")
        if name not in shipped:
            raise SystemExit(
                f"--config {value}: no such file, and not a config shipped with dna-video "
                f"({', '.join(shipped) or 'none found'}). Give a path to a YAML file, or one of those names."
            )
        out[position] = str(shipped[name]) if position == i + 1 else f"--config={shipped[name]}"
    return out


def check_config_files(args: list[str]) -> None:
    """Every ``--config`` file of ``args`` read as YAML; one that is not stops the command with
    one line naming the file, the line and the column (``SystemExit``, status 1), instead of
    the parser's traceback."""
    for _, path in _config_files(args):
        try:
            yaml.safe_load(path.read_text())
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            problem = exc.problem or exc.context or "not YAML"
            raise SystemExit(f"error: {where}: not valid YAML: {problem}") from None
        except yaml.YAMLError as exc:
            raise SystemExit(f"error: {path}: not valid YAML: {' '.join(str(exc).split())}") from None


def _config_files(args: list[str]) -> list[tuple[int, Path]]:
    """(index holding the value, path) of every ``--config`` value that is a file."""
    return [(position, Path(value)) for _, position, value in _config_values(args) if Path(value).is_file()]


def _model_class_path(args: list[str], files: list[tuple[int, Path]]) -> str | None:
    """The model class the command line and its configs name (the last one given), if any."""
    named = None
    for position, path in files:
        model = (yaml.safe_load(path.read_text()) or {}).get("model")
        if isinstance(model, dict) and model.get("class_path"):
            named = (position, model["class_path"])
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in ("--model", "--model.class_path"):
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if named is None or i > named[0]:
                named = (i, value)
    return named[1] if named else None


def upgrade_0_1_command_line(args: list[str], default_model: type) -> list[str]:
    """``args`` with the video and probe modules' old option names (0.1's, and those renamed in 0.3, in config
    files and ``--model.X`` options) turned into their current names (:mod:`dna_video.checkpoints.upgrade`),
    with one warning listing what was renamed. A config file in 0.1 names is read through an
    upgraded copy (the file itself is left as it is)."""
    from dna_video.checkpoints.upgrade import RENAMED_OPTIONS, upgrade_arguments, upgrade_model_options

    files = _config_files(args)
    class_path = _model_class_path(args, files)
    model_class = default_model
    if class_path and "." in class_path:
        module, _, name = class_path.rpartition(".")
        try:
            model_class = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return args  # LightningCLI reports the unknown class
    from dna_video.tasks.video import VideoClassifier

    if not (isinstance(model_class, type) and issubclass(model_class, VideoClassifier)):
        return args
    out, renamed = upgrade_arguments(args)
    for position, path in files:
        config = yaml.safe_load(path.read_text()) or {}
        model = config.get("model")
        if not isinstance(model, dict):
            continue
        options = model.get("init_args", model) if "class_path" in model else model
        old = sorted(set(options) & set(RENAMED_OPTIONS)) if isinstance(options, dict) else []
        upgraded = upgrade_model_options(model)
        if upgraded is model or not old:
            continue
        config["model"] = upgraded
        copy = Path(tempfile.mkdtemp(prefix="dna_video_config_")) / path.name
        copy.write_text(yaml.safe_dump(config, sort_keys=False))
        out[position] = str(copy) if out[position] == str(path) else f"--config={copy}"
        renamed.append(f"{path}: model.{', model.'.join(old)}")
    if renamed:
        log.warning("old option names, read as their new names (CHANGELOG.md, migration tables):\n  %s",
                    "\n  ".join(renamed))
    return out
