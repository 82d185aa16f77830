"""The example configs shipped with the package, and ``--config NAME`` resolved to one of them.

``--config NAME`` (or ``-c NAME``) with a bare name that is not a file names one of the
example configs of the repository's ``configs/`` folder, shipped as the package data of
``dna_video.configs``; ``dna-video configs`` lists them with their paths.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

__all__ = ["packaged_configs", "resolve_config_names"]

_CONFIG_FLAGS = ("--config", "-c")
_BARE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def packaged_configs() -> dict[str, Path]:
    """Config name (file name without ``.yaml``) -> path, for the configs shipped with the
    package; from a checkout, the repository's ``configs/`` folder (the one source)."""
    folder = files("dna_video.configs")
    packaged = [p for p in folder.iterdir() if p.name.endswith(".yaml")] if folder.is_dir() else []
    if not packaged:  # a checkout: dna_video/configs/ holds only a README
        packaged = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
    return {Path(p.name).stem: Path(str(p)) for p in sorted(packaged, key=lambda p: p.name)}


def resolve_config_names(args: list[str]) -> list[str]:
    """``args`` with every ``--config NAME`` / ``-c NAME`` / ``--config=NAME`` whose value is
    not an existing file but a shipped config's name replaced by that config's path. A bare
    name that is neither stops with an error listing the shipped configs."""
    out = list(args)
    for i, arg in enumerate(out):
        flag, _, value = arg.partition("=")
        if arg in _CONFIG_FLAGS and i + 1 < len(out):
            position, value = i + 1, out[i + 1]
        elif flag == "--config" and value:
            position = i
        else:
            continue
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
