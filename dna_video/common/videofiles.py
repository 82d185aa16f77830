"""Which files are videos, by name: the suffixes that ``predict`` looks for in a folder and that
``prepare videos`` scans, stated once here (the lowest layer, so that the data, prediction and
tools layers all read the same list). A dataset whose files have a fixed form keeps its own
narrower rule (NTU RGB+D: ``.avi`` or ``.mp4``; Toyota Smarthome: ``.mp4``), a part of this list.
"""

from __future__ import annotations

import os
from pathlib import PurePath

__all__ = ["VIDEO_SUFFIXES", "is_video_name"]

#: Lower-case suffixes of the containers decord and PyAV (FFmpeg) read; a name's suffix is
#: compared lower-cased (``CLIP.MP4`` is a video).
VIDEO_SUFFIXES: frozenset[str] = frozenset(
    {".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv"})


def is_video_name(path: str | os.PathLike[str]) -> bool:
    """Whether ``path``'s name ends in a video suffix (any case); the file is not opened."""
    return PurePath(path).suffix.lower() in VIDEO_SUFFIXES
