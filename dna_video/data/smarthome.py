"""Toyota Smarthome (trimmed): clip names, evaluation protocols and the DataModule.

Clips are named ``<Activity>_pNN_rNN_vNN_cNN.mp4``: the activity (which may hold a ``.``,
never a ``_``), subject, two undocumented counters (occurrence / session) and camera.
The protocols (``cs``, ``cv1``, ``cv2``: class list, which subjects or cameras make each
split, full-dataset counts) are read from ``data/toyota_smarthome_splits.yaml``; this module
is the one place that applies them to file names.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dna_video.data.datamodule import Catalog, ProtocolDataModule
from dna_video.data.dataset import VideoRecord
from dna_video.data.protocols import Protocol, load_split_file

log = logging.getLogger(__name__)

__all__ = [
    "SmarthomeName",
    "parse_smarthome_name",
    "smarthome_protocol",
    "smarthome_catalog",
    "ToyotaSmarthome",
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
    files: list[Path], protocol: Protocol, train_on_val: bool = False,
    known_activities: frozenset[str] | set[str] = KNOWN_ACTIVITIES,
) -> Catalog:
    """Sort clip files into the splits of ``protocol``, or leave them out with a reason.

    ``train_on_val`` puts the validation clips in the training split too;
    ``known_activities``: the activity names a file may carry (others: unknown activity).
    """
    catalog = Catalog(f"Toyota Smarthome {protocol.name}", STRICT_REASONS, (NOT_MP4, MALFORMED))
    label_of = protocol.label_of
    for path in files:
        name = parse_smarthome_name(path.name)
        if not path.name.endswith(".mp4"):
            catalog.exclude(None, NOT_MP4, str(path))
        elif name is None:
            catalog.exclude(None, MALFORMED, str(path))
        elif name.activity not in known_activities:
            catalog.exclude(None, UNKNOWN_ACTIVITY, str(path))
        elif name.subject not in SUBJECTS or name.camera not in CAMERAS:
            catalog.exclude(None, UNKNOWN_FIELD, str(path))
        else:
            split = protocol.split_of(getattr(name, protocol.split_by))
            if split is None:
                catalog.exclude(None, protocol.unused_reason, str(path))
            elif name.activity not in label_of:
                catalog.exclude(split, OUTSIDE_CLASSES, str(path))
            else:
                record = VideoRecord(str(path), label_of[name.activity])
                catalog.add(split, record)
                if train_on_val and split == "val":
                    catalog.add("train", record)
    return catalog


class ToyotaSmarthome(ProtocolDataModule):
    """Toyota Smarthome (trimmed), split by a protocol of Das et al. (ICCV 2019).

    Protocols (``data/toyota_smarthome_splits.yaml``): ``cs`` (31 classes; train subjects
    without 19 and 25, validation 19 and 25, test the seven test subjects), ``cv1`` (19
    classes; train camera 1, validation 5, test 2) and ``cv2`` (19 classes; train cameras 1,
    3, 4, 6 and 7, validation 5, test 2). Clips of activities outside the protocol's classes
    (``Pour.Fromcup``, the cross-subject-only classes in CV) are left out and counted. The
    main metric is the mean per-class accuracy over the classes present (``val/mca``):
    camera 5 holds no Cutbread and no Eat.Attable clip.

    Args:
        root: the folder of the mp4 clips (e.g. ``Smarthome/mp4``, or the output of
            ``dna-video prepare toyota_smarthome ... --transcode``); a folder whose
            ``mp4/`` subfolder holds them works too.
        protocol: ``cs``, ``cv1`` or ``cv2``.
        train_on_val: train on the validation split as well (e.g. the cross-subject models
            of most works, trained on all 11 training subjects); validation still runs on it.
        strict: stop with an error naming them on malformed file names and unknown
            activities, subjects or cameras, instead of leaving them out with a count.
        kwargs: everything :class:`VideoDataModule` takes (batch size, sampling, transforms).
    """

    def __init__(
        self,
        root: str,
        protocol: Literal["cs", "cv1", "cv2"] = "cs",
        train_on_val: bool = False,
        strict: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(root=root, strict=strict, **kwargs)
        self.protocol = smarthome_protocol(protocol)
        self.train_on_val = train_on_val

    def video_folder(self) -> Path:
        root = Path(self.root)
        if not root.is_dir():
            raise FileNotFoundError(f"Toyota Smarthome root {root} is not a folder: set data.init_args.root")
        if not any(root.glob("*.mp4")) and (root / "mp4").is_dir():
            return root / "mp4"
        return root

    def list_files(self) -> tuple[list[Path], str]:
        folder = self.video_folder()
        return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and not p.is_dir()), str(folder)

    def make_catalog(self, files: list[Path]) -> Catalog:
        return smarthome_catalog(files, self.protocol, self.train_on_val)
