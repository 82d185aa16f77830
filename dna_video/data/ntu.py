"""NTU RGB+D 60: sample names, evaluation protocols and the DataModule.

RGB files are named ``SsssCcccPpppRrrrAaaa_rgb.avi`` (setup, camera, performer, replication,
action; label = action - 1); the same names transcoded to ``.mp4``, with or without
``_rgb``, are accepted. The protocols (``cs``, ``cv``) and the ranges of each field are
read from ``data/ntu60_splits.yaml``, the class names from ``data/ntu60_classes.txt``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from dna_video.data.datamodule import Catalog, ProtocolDataModule
from dna_video.data.dataset import VideoRecord
from dna_video.data.protocols import Protocol, load_split_file

log = logging.getLogger(__name__)

__all__ = ["NTUName", "parse_ntu_name", "ntu_protocol", "ntu_catalog", "read_sample_list", "NTURGBD60", "PROTOCOLS"]

_NAME = re.compile(
    r"^S(?P<setup>\d{3})C(?P<camera>\d{3})P(?P<performer>\d{3})R(?P<replication>\d{3})A(?P<action>\d{3})"
    r"(?:_rgb)?\.(?:avi|mp4)$"
)
_SAMPLE = re.compile(r"S\d{3}C\d{3}P\d{3}R\d{3}A\d{3}")
VIDEO_SUFFIXES = (".avi", ".mp4")

_SPEC, PROTOCOLS = load_split_file("ntu60_splits.yaml")
RANGES = {field: (int(lo), int(hi)) for field, (lo, hi) in _SPEC["ranges"].items()}
NTU120_RANGES = {field: (int(lo), int(hi)) for field, (lo, hi) in _SPEC["ntu120_ranges"].items()}

# Why a file is left out. The first two are errors in strict mode.
MALFORMED = "malformed file name"
UNKNOWN_FIELD = "field outside NTU RGB+D 60's values"
NTU120 = "NTU RGB+D 120 sample"
NOT_VIDEO = "not an .avi or .mp4 file"
EXCLUSION_LIST = "in the exclusion list"
STRICT_REASONS = (MALFORMED, UNKNOWN_FIELD)


@dataclass(frozen=True)
class NTUName:
    """The fields of an NTU RGB+D sample name."""

    setup: int
    camera: int
    performer: int
    replication: int
    action: int

    @property
    def sample(self) -> str:
        """The sample name, e.g. ``S001C002P003R002A013``."""
        return (
            f"S{self.setup:03d}C{self.camera:03d}P{self.performer:03d}"
            f"R{self.replication:03d}A{self.action:03d}"
        )

    @property
    def performance(self) -> tuple[int, int, int, int]:
        """One performance, filmed by the three cameras at once: (setup, performer,
        replication, action)."""
        return self.setup, self.performer, self.replication, self.action


def parse_ntu_name(filename: str) -> NTUName | None:
    """Parse a file name (no folders); None if it does not follow the layout."""
    m = _NAME.match(filename)
    if m is None:
        return None
    return NTUName(*(int(m[k]) for k in ("setup", "camera", "performer", "replication", "action")))


def ntu_protocol(name: str) -> Protocol:
    """The protocol ``cs`` or ``cv``."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown NTU RGB+D 60 protocol {name!r}: use one of {sorted(PROTOCOLS)}")
    return PROTOCOLS[name]


def read_sample_list(path: str | Path) -> set[str]:
    """Sample names in a text file, e.g. the 302 samples without skeletons: one a line, as
    a bare name (``S001C002P005R002A008``) or a file name (``..._rgb.avi``); blank lines and
    ``#`` comments are skipped. A line without a sample name is an error naming the line."""
    path = Path(path)
    names = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        m = _SAMPLE.search(Path(text).name)
        if m is None:
            raise ValueError(f"{path}:{number}: {text!r} is not an NTU sample name (SsssCcccPpppRrrrAaaa)")
        names.add(m.group(0))
    return names


def _classify(name: NTUName) -> str | None:
    """The reason to leave out a parsed name, or None when it is an NTU-60 sample."""
    values = {"setup": name.setup, "camera": name.camera, "performer": name.performer,
              "replication": name.replication, "action": name.action}

    def inside(ranges: dict[str, tuple[int, int]]) -> bool:
        return all(ranges[f][0] <= v <= ranges[f][1] for f, v in values.items())

    if inside(RANGES):
        return None
    return NTU120 if inside(NTU120_RANGES) else UNKNOWN_FIELD


def ntu_catalog(
    files: list[Path],
    protocol: Protocol,
    exclude: set[str] = frozenset(),
    val_fraction: float = 0.0,
    val_seed: int = 0,
) -> Catalog:
    """Sort files into the splits of ``protocol`` or leave them out with a reason.

    ``val_fraction`` of the training performances (setup, performer, replication, action;
    all cameras of one performance together, so no performance is seen from another
    camera in training) move to a validation split, drawn per action with ``val_seed``.
    Without it the validation split is the test split (NTU has no validation split).
    """
    catalog = Catalog(f"NTU RGB+D 60 {protocol.name}", STRICT_REASONS, (NOT_VIDEO, MALFORMED))
    seen: dict[str, str] = {}
    train: list[tuple[NTUName, VideoRecord]] = []
    for path in files:
        if path.suffix not in VIDEO_SUFFIXES:
            catalog.exclude(None, NOT_VIDEO, str(path))
            continue
        name = parse_ntu_name(path.name)
        if name is None:
            catalog.exclude(None, MALFORMED, str(path))
            continue
        reason = _classify(name)
        if reason is not None:
            catalog.exclude(None, reason, str(path))
            continue
        if name.sample in seen:
            raise ValueError(
                f"NTU sample {name.sample} found twice: {seen[name.sample]} and {path}; "
                "point data.init_args.root at one copy of the dataset (e.g. the AVIs or the transcoded mp4s)"
            )
        seen[name.sample] = str(path)
        split = protocol.split_of(getattr(name, protocol.split_by))
        if split is None:
            catalog.exclude(None, protocol.unused_reason, str(path))
        elif name.sample in exclude:
            catalog.exclude(split, EXCLUSION_LIST, str(path))
        elif split == "train":
            train.append((name, VideoRecord(str(path), name.action - 1)))
        else:
            catalog.add(split, VideoRecord(str(path), name.action - 1))

    held_out = _carve_validation(train, val_fraction, val_seed)
    for name, record in train:
        catalog.add("val" if name.performance in held_out else "train", record)
    if not held_out:  # no validation split of its own: validate on the test split
        catalog.records["val"] = list(catalog.records.get("test", []))
        catalog.excluded["val"] = dict(catalog.excluded.get("test", {}))
        catalog.notes.append(
            "no validation split (val_fraction 0)" if not val_fraction else
            f"val_fraction {val_fraction} holds out no performance (too few per action)"
        )
        catalog.notes[-1] += ": validating on the test split"
    missing_from_list = len(exclude - set(seen))
    if exclude:
        log.info(
            "NTU exclusion list: %d samples, %d of them found and left out, %d not under the root",
            len(exclude), len(exclude) - missing_from_list, missing_from_list,
        )
    return catalog


def _carve_validation(train: list[tuple[NTUName, VideoRecord]], fraction: float, seed: int) -> set:
    """Performances moved from training to validation: round(fraction x count) per action."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {fraction}")
    if fraction == 0.0:
        return set()
    rng = np.random.default_rng(seed)
    by_action: dict[int, list[tuple]] = {}
    for name, _ in train:
        by_action.setdefault(name.action, [])
        if name.performance not in by_action[name.action]:
            by_action[name.action].append(name.performance)
    held_out = set()
    for action in sorted(by_action):
        performances = sorted(by_action[action])
        k = int(round(fraction * len(performances)))
        for i in rng.permutation(len(performances))[:k]:
            held_out.add(performances[i])
    return held_out


class NTURGBD60(ProtocolDataModule):
    """NTU RGB+D 60 (Shahroudy et al., CVPR 2016) RGB videos, split by a protocol.

    Protocols (``data/ntu60_splits.yaml``): ``cs`` (train on the 20 training performers,
    test on the other 20) and ``cv`` (train on cameras 2 and 3, test on camera 1). The
    main metric is top-1 accuracy (``val/top1``).

    Args:
        root: the folder of the videos, searched recursively (``nturgb+d_rgb`` with the
            ``*_rgb.avi`` files, or the mp4 files written by
            ``dna-video prepare ntu60 ... --transcode``).
        protocol: ``cs`` or ``cv``.
        exclude_file: optional text file of sample names to leave out (counted), e.g. the
            302 samples without skeletons; one name a line.
        val_fraction: fraction of the training performances (all cameras of a performance
            together, per action) held out for validation. 0: NTU has no validation split,
            so validation runs on the test split (what published results do; then do not
            select checkpoints on it).
        val_seed: seed of the validation draw (the same seed holds out the same videos).
        strict: stop with an error naming them on malformed file names and field values
            outside NTU-60, instead of leaving them out with a count.
        kwargs: everything :class:`VideoDataModule` takes (batch size, sampling, transforms).
    """

    def __init__(
        self,
        root: str,
        protocol: Literal["cs", "cv"] = "cs",
        exclude_file: str | None = None,
        val_fraction: float = 0.0,
        val_seed: int = 0,
        strict: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(root=root, strict=strict, **kwargs)
        self.protocol = ntu_protocol(protocol)
        self.exclude_file = exclude_file
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        self.val_fraction = val_fraction
        self.val_seed = val_seed

    def list_files(self) -> tuple[list[Path], str]:
        root = Path(self.root)
        if not root.is_dir():
            raise FileNotFoundError(f"NTU RGB+D root {root} is not a folder: set data.init_args.root")
        return sorted(p for p in root.rglob("*") if not p.name.startswith(".") and not p.is_dir()), str(root)

    def make_catalog(self, files: list[Path]) -> Catalog:
        exclude = read_sample_list(self.exclude_file) if self.exclude_file else set()
        return ntu_catalog(files, self.protocol, exclude, self.val_fraction, self.val_seed)
