"""Toyota Smarthome (trimmed) file names and subject splits.

Clips are named ``<Activity>_pNN_rNN_vNN_cNN.mp4``: the activity (which may hold a ``.``,
never a ``_``), subject, two undocumented counters (occurrence / session) and camera.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SmarthomeName", "parse_smarthome_name", "CS_TRAIN_SUBJECTS", "CS_VAL_SUBJECTS", "CS_TEST_SUBJECTS"]

_NAME = re.compile(
    r"^(?P<activity>[A-Za-z][A-Za-z.]*)_p(?P<subject>\d+)_r(?P<r>\d+)_v(?P<v>\d+)_c(?P<camera>\d+)\.mp4$"
)

# Cross-subject protocol (Das et al., ICCV 2019). The authors' baseline validates on
# subjects 19 and 25, which otherwise belong to the training side.
CS_TRAIN_SUBJECTS = frozenset({3, 4, 6, 7, 9, 12, 13, 15, 17})
CS_VAL_SUBJECTS = frozenset({19, 25})
CS_TEST_SUBJECTS = frozenset({2, 10, 11, 14, 16, 18, 20})


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
