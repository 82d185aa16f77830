"""Class lists and split definitions, read from the data files under ``data/``.

Every dataset's facts (class order, which subjects or cameras make each split, the video
counts of the full dataset) live in one place, the repository's ``data/`` folder, and are
read from there by the DataModules, the ``prepare`` command and the tests' expectations.
A built package (``pip install .``, a wheel) carries the same files as the package data of
``dna_video.resources`` (``pyproject.toml`` maps ``data/`` there), read through
:mod:`importlib.resources`; a checkout reads ``data/`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from dna_video.common.install import pip_install

__all__ = ["DATA_DIR", "Protocol", "data_file", "read_class_names", "load_split_file"]

# A file every data folder holds: tells an installed copy's package data from the checkout's
# placeholder folder (dna_video/resources/ holds only a README there).
_PROBE = "toyota_smarthome_splits.yaml"


def _find_data_dir() -> Path:
    """The installed package's ``dna_video.resources`` if it holds the data files, else the
    checkout's top-level ``data/`` folder."""
    packaged = files("dna_video.resources").joinpath(_PROBE)
    # A plain file on disk: wheels install unzipped, and data_file() hands out paths.
    if isinstance(packaged, Path) and packaged.is_file():
        return packaged.parent
    return Path(__file__).resolve().parents[2] / "data"


DATA_DIR = _find_data_dir()


def data_file(name: str | Path) -> Path:
    """A file of dna-video's data folder (an absolute path is returned as is)."""
    path = Path(name)
    path = path if path.is_absolute() else DATA_DIR / path
    if not path.is_file():
        raise FileNotFoundError(
            f"data file {path} not found: dna-video reads its class lists and split definitions "
            f"from {DATA_DIR} (the package data of dna_video.resources, or data/ in a checkout); "
            f"reinstall the package ({pip_install('.')} in the checkout) or run from a complete checkout"
        )
    return path


def read_class_names(path: str | Path) -> list[str]:
    """Class names, one a line, line i = label i (blank lines and ``#`` comments skipped)."""
    path = data_file(path)
    names = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    names = [n for n in names if n]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"{path}: duplicated class names {dup}")
    if not names:
        raise ValueError(f"{path}: no class names")
    return names


@dataclass(frozen=True)
class Protocol:
    """One evaluation protocol: its class list and the name-field values of each split.

    Attributes:
        name: e.g. ``cs`` or ``cv2``.
        classes: class names in label order.
        split_by: the file-name field that decides the split (``subject``, ``camera``, ...).
        splits: split -> field values, e.g. ``{"train": {1}, "val": {5}, "test": {2}}``.
        expected_videos: split -> video count of the full, intact dataset.
        description: one line for logs and reports.
    """

    name: str
    classes: tuple[str, ...]
    split_by: str
    splits: dict[str, frozenset[int]]
    expected_videos: dict[str, int]
    description: str = ""

    def split_of(self, value: int) -> str | None:
        """The split a file whose ``split_by`` field is ``value`` belongs to (None: unused)."""
        for split, values in self.splits.items():
            if value in values:
                return split
        return None

    @property
    def label_of(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.classes)}

    @property
    def unused_reason(self) -> str:
        """Why a file whose ``split_by`` value is in no split is left out (log and counts)."""
        return f"{self.split_by} not used by the protocol"


def load_split_file(name: str | Path, default_classes: str | None = None) -> tuple[dict[str, Any], dict[str, Protocol]]:
    """Read a split-definition YAML of the data folder: (its top-level facts, protocol name -> Protocol).

    A protocol's class list is its own ``classes`` entry or the file's top-level one.
    """
    path = data_file(name)
    spec = yaml.safe_load(path.read_text())
    protocols = {}
    for key, p in spec["protocols"].items():
        classes_file = p.get("classes", spec.get("classes", default_classes))
        splits = {split: frozenset(int(v) for v in values) for split, values in p["splits"].items()}
        overlap = [(a, b) for a in splits for b in splits if a < b and splits[a] & splits[b]]
        if overlap:
            raise ValueError(f"{path}: protocol {key}: splits {overlap} share {p['split_by']} values")
        protocols[key] = Protocol(
            name=key,
            classes=tuple(read_class_names(classes_file)),
            split_by=p["split_by"],
            splits=splits,
            expected_videos={k: int(v) for k, v in p.get("expected_videos", {}).items()},
            description=p.get("description", ""),
        )
    return spec, protocols
