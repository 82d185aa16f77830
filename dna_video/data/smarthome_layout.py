"""Toyota Smarthome (trimmed)'s file layout: clip names, evaluation protocols, the catalog of a
folder. Lightning-free, so that ``dna-video prepare`` scans a copy without importing torch or
Lightning; the DataModule (:class:`~.smarthome.ToyotaSmarthome`) uses the same code.

Clips are named ``<Activity>_pNN_rNN_vNN_cNN.mp4``: the activity (which may hold a ``.``,
never a ``_``), subject, two undocumented counters (occurrence / session) and camera.
The protocols (``cs``, ``cv1``, ``cv2``: class list, which subjects or cameras make each
split, full-dataset counts) are read from ``data/toyota_smarthome_splits.yaml``; this module
is the one place that applies them to file names.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dna_video.data.catalog import Catalog
from dna_video.data.protocols import Protocol, load_split_file
from dna_video.data.records import list_files

log = logging.getLogger(__name__)

__all__ = [
    "SmarthomeName",
    "parse_smarthome_name",
    "smarthome_protocol",
    "smarthome_catalog",
    "smarthome_video_folder",
    "list_smarthome_files",
    "PROTOCOLS",
    "CS_TRAIN_SUBJECTS",
    "CS_VAL_SUBJECTS",
    "CS_TEST_SUBJECTS",
]

_NAME = re.compile(
    r"^(?P<activity>[A-Za-z][A-Za-z.]*)_p(?P<subject>\d+)_r(?P<r>\d+)_v(?P<v>\d+)_c(?P<camera>\d+)\.mp4$"
)

_SPEC, PROTOCOLS = load_split_file("toyota_smarthome_splits.yaml")
SUBJECTS = frozenset(int(s) for s in _SPEC["subjects"])
CAMERAS = frozenset(int(c) for c in _SPEC["cameras"])
# Activities of the dataset: the 31 cross-subject classes, plus names found in the public
# split lists that are no class (Pour.Fromcup). Anything else is an unknown activity.
ACTIVITIES_OUTSIDE_CLASSES = frozenset(_SPEC["activities_outside_classes"])
KNOWN_ACTIVITIES = frozenset(PROTOCOLS["cs"].classes) | ACTIVITIES_OUTSIDE_CLASSES

# Cross-subject protocol (Das et al., ICCV 2019). The authors' baseline validates on
# subjects 19 and 25, which otherwise belong to the training side.
CS_TRAIN_SUBJECTS = PROTOCOLS["cs"].splits["train"]
CS_VAL_SUBJECTS = PROTOCOLS["cs"].splits["val"]
CS_TEST_SUBJECTS = PROTOCOLS["cs"].splits["test"]

# Why a file is left out. The first three are errors in strict mode.
MALFORMED = "malformed file name"
UNKNOWN_ACTIVITY = "unknown activity"
UNKNOWN_FIELD = "unknown subject or camera"
NOT_MP4 = "not an .mp4 file"
OUTSIDE_CLASSES = "activity outside the protocol's classes"
STRICT_REASONS = (MALFORMED, UNKNOWN_ACTIVITY, UNKNOWN_FIELD)


@dataclass(frozen=True)
class SmarthomeName:
    """The fields of a Toyota Smarthome clip name."""

    activity: str
    subject: int
    r: int
    v: int
    camera: int

    @property
    def filename(self) -> str:
        return f"{self.activity}_p{self.subject:02d}_r{self.r:02d}_v{self.v:02d}_c{self.camera:02d}.mp4"


def parse_smarthome_name(filename: str) -> SmarthomeName | None:
    """Parse a clip's file name (no folders); None if it does not follow the layout."""
    m = _NAME.match(filename)
    if m is None:
        return None
    return SmarthomeName(
        m["activity"], int(m["subject"]), int(m["r"]), int(m["v"]), int(m["camera"])
    )


def smarthome_protocol(name: str) -> Protocol:
    """The protocol ``cs``, ``cv1`` or ``cv2``."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown Toyota Smarthome protocol {name!r}: use one of {sorted(PROTOCOLS)}")
    return PROTOCOLS[name]


def smarthome_catalog(
    files: Sequence[str | os.PathLike], protocol: Protocol, train_on_val: bool = False,
    known_activities: frozenset[str] | set[str] = KNOWN_ACTIVITIES,
) -> Catalog:
    """Sort clip files into the splits of ``protocol``, or leave them out with a reason.

    ``train_on_val`` puts the validation clips in the training split too;
    ``known_activities``: the activity names a file may carry (others: unknown activity).
    One pass over the names, no object per clip: the splits are filled a split at a time.
    """
    catalog = Catalog(f"Toyota Smarthome {protocol.name}", STRICT_REASONS, (NOT_MP4, MALFORMED))
    label_of = protocol.label_of
    field = ("activity", "subject", "r", "v", "camera").index(protocol.split_by)
    splits: dict[str, tuple[list[str], list[int]]] = {split: ([], []) for split in protocol.splits}
    match = _NAME.match
    for path in files:
        path = os.fspath(path)
        name = os.path.basename(path)
        m = match(name)
        if not name.endswith(".mp4"):
            catalog.exclude(None, NOT_MP4, path)
        elif m is None:
            catalog.exclude(None, MALFORMED, path)
        elif m["activity"] not in known_activities:
            catalog.exclude(None, UNKNOWN_ACTIVITY, path)
        elif int(m["subject"]) not in SUBJECTS or int(m["camera"]) not in CAMERAS:
            catalog.exclude(None, UNKNOWN_FIELD, path)
        else:
            split = protocol.split_of(int(m.group(field + 1)))
            if split is None:
                catalog.exclude(None, protocol.unused_reason, path)
            elif m["activity"] not in label_of:
                catalog.exclude(split, OUTSIDE_CLASSES, path)
            else:
                for into in (split, "train") if train_on_val and split == "val" else (split,):
                    splits.setdefault(into, ([], []))[0].append(path)
                    splits[into][1].append(label_of[m["activity"]])
    for split, (paths, labels) in splits.items():
        if paths:
            catalog.add_many(split, paths, labels)
    return catalog


def smarthome_video_folder(root: str | os.PathLike) -> Path:
    """The folder of the clips: ``root``, or its ``mp4/`` subfolder when the root holds no
    clip itself (the dataset unpacks as ``Smarthome/mp4/``)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"Toyota Smarthome root {root} is not a folder: set data.init_args.root")
    if not any(root.glob("*.mp4")) and (root / "mp4").is_dir():
        return root / "mp4"
    return root


def list_smarthome_files(root: str | os.PathLike) -> tuple[list[str], str]:
    """The files of the clip folder (:func:`smarthome_video_folder`, not recursive) and the
    folder listed."""
    folder = smarthome_video_folder(root)
    return list_files(folder, recursive=False), str(folder)
