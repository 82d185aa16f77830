"""Toyota Smarthome (trimmed): the DataModule. The file layout (clip names, protocols, the
catalog of a folder) is :mod:`.smarthome_layout`'s, re-exported here.

Clips are named ``<Activity>_pNN_rNN_vNN_cNN.mp4``: the activity (which may hold a ``.``,
never a ``_``), subject, two undocumented counters (occurrence / session) and camera.
The protocols (``cs``, ``cv1``, ``cv2``: class list, which subjects or cameras make each
split, full-dataset counts) are read from ``data/toyota_smarthome_splits.yaml``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from dna_video.data.catalog import Catalog
from dna_video.data.datamodule import ProtocolDataModule
from dna_video.data.smarthome_layout import (  # noqa: F401  (the layout's names, importable from here as before)
    ACTIVITIES_OUTSIDE_CLASSES,
    CAMERAS,
    CS_TEST_SUBJECTS,
    CS_TRAIN_SUBJECTS,
    CS_VAL_SUBJECTS,
    KNOWN_ACTIVITIES,
    MALFORMED,
    NOT_MP4,
    OUTSIDE_CLASSES,
    PROTOCOLS,
    STRICT_REASONS,
    SUBJECTS,
    UNKNOWN_ACTIVITY,
    UNKNOWN_FIELD,
    SmarthomeName,
    list_smarthome_files,
    parse_smarthome_name,
    smarthome_catalog,
    smarthome_protocol,
    smarthome_video_folder,
)

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
        return smarthome_video_folder(self.root)

    def list_files(self) -> tuple[list[str], str]:
        return list_smarthome_files(self.root)

    def make_catalog(self, files: Sequence[str | os.PathLike]) -> Catalog:
        return smarthome_catalog(files, self.protocol, self.train_on_val)
