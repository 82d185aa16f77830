"""NTU RGB+D 60's file layout: sample names, evaluation protocols, the catalog of a root.

Lightning-free (numpy only), so that ``dna-video prepare`` scans a copy without importing
torch or Lightning; the DataModule (:class:`~.ntu.NTURGBD60`) sorts its root with the same
code. RGB files are named ``SsssCcccPpppRrrrAaaa_rgb.avi`` (setup, camera, performer, replication,
action; label = action - 1); the same names transcoded to ``.mp4``, with or without
``_rgb``, are accepted. The protocols (``cs``, ``cv``) and the ranges of each field are
read from ``data/ntu60_splits.yaml``, the class names from ``data/ntu60_classes.txt``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dna_video.data.catalog import Catalog
from dna_video.data.protocols import Protocol, load_split_file
from dna_video.data.records import RecordTable, list_files

log = logging.getLogger(__name__)

__all__ = ["NTUName", "parse_ntu_name", "parse_ntu_names", "ntu_protocol", "ntu_catalog", "list_ntu_files",
           "read_sample_list", "PROTOCOLS"]

_NAME = re.compile(
    r"^S(?P<setup>\d{3})C(?P<camera>\d{3})P(?P<performer>\d{3})R(?P<replication>\d{3})A(?P<action>\d{3})"
    r"(?:_rgb)?\.(?:avi|mp4)\Z",
    re.ASCII,
)
_SAMPLE = re.compile(r"S\d{3}C\d{3}P\d{3}R\d{3}A\d{3}")
# NTU's own files: a part of dna_video.common.videofiles.VIDEO_SUFFIXES (the name pattern's).
NTU_SUFFIXES = (".avi", ".mp4")

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


_FIELDS = ("setup", "camera", "performer", "replication", "action")
# Where each field's three digits sit in a name, and the letters before them.
_LETTERS = {0: "S", 4: "C", 8: "P", 12: "R", 16: "A"}
_SUFFIXES = ("_rgb.avi", "_rgb.mp4", ".avi", ".mp4")


def parse_ntu_names(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`parse_ntu_name` of many names at once, as arrays: (parsed (N,) bool, fields (N, 5)
    int64 in the order setup, camera, performer, replication, action; 0 where not parsed).

    The names are compared as fixed-width arrays of code points (no Python work per name),
    which accepts exactly what the name pattern accepts (tested against it)."""
    fields = np.zeros((len(names), 5), dtype=np.int64)
    if not names:
        return np.zeros(0, dtype=bool), fields
    width = max(28, max(map(len, names)))
    codes = np.array(names, dtype=f"<U{width}").view(np.uint32).reshape(len(names), width)
    ok = np.zeros(len(names), dtype=bool)
    for suffix in _SUFFIXES:
        tail = np.array(list(suffix.encode()) + [0] * (width - 20 - len(suffix)), dtype=np.uint32)
        ok |= (codes[:, 20:] == tail).all(axis=1)
    for position, letter in _LETTERS.items():
        ok &= codes[:, position] == ord(letter)
        digits = codes[:, position + 1: position + 4].astype(np.int64) - ord("0")
        ok &= ((digits >= 0) & (digits <= 9)).all(axis=1)
        fields[:, position // 4] = digits @ np.array([100, 10, 1])
    fields[~ok] = 0
    return ok, fields


def _inside(fields: np.ndarray, ranges: dict[str, tuple[int, int]]) -> np.ndarray:
    lows = np.array([ranges[f][0] for f in _FIELDS])
    highs = np.array([ranges[f][1] for f in _FIELDS])
    return ((fields >= lows) & (fields <= highs)).all(axis=1)


def _sample_key(fields: np.ndarray) -> np.ndarray:
    """One integer per sample name (each field below 1000)."""
    return fields @ (1000 ** np.arange(4, -1, -1))


def ntu_catalog(
    files: Sequence[str | os.PathLike],
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
    Array work over the names (56,880 in well under a second; benchmarks/README.md).
    """
    catalog = Catalog(f"NTU RGB+D 60 {protocol.name}", STRICT_REASONS, (NOT_VIDEO, MALFORMED))
    paths = [os.fspath(f) for f in files]
    names = [p.rpartition(os.sep)[2] for p in paths]
    # Path.suffix in NTU_SUFFIXES (a name of leading dots and the suffix has none).
    video = np.array([n.endswith(NTU_SUFFIXES) and bool(n[:-4].strip(".")) for n in names], dtype=bool)
    parsed, fields = parse_ntu_names(names)
    parsed &= video
    ntu60 = parsed & _inside(fields, RANGES)
    ntu120 = parsed & ~ntu60 & _inside(fields, NTU120_RANGES)

    def pick(mask: np.ndarray) -> list[str]:
        return [paths[i] for i in np.flatnonzero(mask).tolist()]

    catalog.exclude_many(None, NOT_VIDEO, pick(~video))
    catalog.exclude_many(None, MALFORMED, pick(video & ~parsed))
    for i in np.flatnonzero(parsed & ~ntu60).tolist():  # in file order, as found
        catalog.exclude(None, NTU120 if ntu120[i] else UNKNOWN_FIELD, paths[i])

    rows = np.flatnonzero(ntu60)
    keys = _sample_key(fields[rows])
    unique, first, counts = np.unique(keys, return_index=True, return_counts=True)
    if (counts > 1).any():
        # The first file whose sample was already seen, and the file it repeats.
        again = min(i for i in range(len(rows)) if first[np.searchsorted(unique, keys[i])] != i)
        earlier = rows[first[np.searchsorted(unique, keys[again])]]
        raise ValueError(
            f"NTU sample {names[rows[again]][:20]} found twice: {paths[earlier]} and {paths[rows[again]]}; "
            "point data.init_args.root at one copy of the dataset (e.g. the AVIs or the transcoded mp4s)"
        )
    column = _FIELDS.index(protocol.split_by)
    split_codes = {split: i for i, split in enumerate(protocol.splits)}
    split_of = np.full(len(paths), -1)
    for split, values in protocol.splits.items():
        split_of[ntu60 & np.isin(fields[:, column], sorted(values))] = split_codes[split]
    catalog.exclude_many(None, protocol.unused_reason, pick(ntu60 & (split_of < 0)))
    excluded = np.zeros(len(paths), dtype=bool)
    if exclude:
        samples = np.array([n[:20] for n in names])
        excluded = ntu60 & np.isin(samples, sorted(exclude))
    labels = fields[:, 4] - 1
    for split, code in split_codes.items():
        here = split_of == code
        catalog.exclude_many(split, EXCLUSION_LIST, pick(here & excluded))
        if split != "train":
            kept = np.flatnonzero(here & ~excluded)
            catalog.add_many(split, [paths[i] for i in kept.tolist()], labels[kept])

    train = np.flatnonzero((split_of == split_codes.get("train", -2)) & ~excluded)
    held_out = _carve_validation(fields[train], val_fraction, val_seed)
    for split, rows_of_split in (("train", train[~held_out]), ("val", train[held_out])):
        if rows_of_split.size:
            catalog.add_many(split, [paths[i] for i in rows_of_split.tolist()], labels[rows_of_split])
    if not held_out.any():  # no validation split of its own: validate on the test split
        catalog.set_split("val", catalog.records.get("test") or RecordTable([], []), catalog.excluded.get("test", {}))
        catalog.notes.append(
            "no validation split (val_fraction 0)" if not val_fraction else
            f"val_fraction {val_fraction} holds out no performance (too few per action)"
        )
        catalog.notes[-1] += ": validating on the test split"
    if exclude:
        found = len(exclude & {n[:20] for n in np.asarray(names, dtype=object)[ntu60].tolist()})
        log.info(
            "NTU exclusion list: %d samples, %d of them found and left out, %d not under the root",
            len(exclude), found, len(exclude) - found,
        )
    return catalog


def _carve_validation(train: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Which training rows (fields (N, 5)) move to validation: of each action's performances
    (setup, performer, replication), sorted, round(fraction x count) drawn with ``seed``, actions
    in order (the same draws hold out the same videos in every version)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {fraction}")
    held = np.zeros(len(train), dtype=bool)
    if fraction == 0.0 or not len(train):
        return held
    rng = np.random.default_rng(seed)
    performance = train[:, [0, 2, 3]] @ np.array([1_000_000, 1000, 1])  # sorts as (setup, performer, replication)
    for action in np.unique(train[:, 4]).tolist():
        mine = train[:, 4] == action
        performances = np.unique(performance[mine])
        k = int(round(fraction * len(performances)))
        chosen = performances[rng.permutation(len(performances))[:k]]
        held |= mine & np.isin(performance, chosen)
    return held


def list_ntu_files(root: str | os.PathLike) -> tuple[list[str], str]:
    """The files under an NTU RGB+D root, searched recursively (:func:`~.records.list_files`),
    and the folder listed."""
    if not Path(root).is_dir():
        raise FileNotFoundError(f"NTU RGB+D root {root} is not a folder: set data.init_args.root")
    return list_files(root), str(root)
