"""Which videos a ``predict`` command line names: video files, folders (searched recursively for
files with a video suffix) and list files (one video a line, optionally followed by an integer
label, as the list-file datasets read them)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["VIDEO_SUFFIXES", "LIST_SUFFIXES", "collect_videos", "read_list_file"]

VIDEO_SUFFIXES = {".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv"}
LIST_SUFFIXES = {".txt", ".csv", ".lst", ".list"}


def read_list_file(path: Path, root: Path | None = None) -> list[tuple[str, int | None]]:
    """(video path, label or None) of each line of list file ``path``: ``name`` or ``name
    label`` (``name,label`` in a CSV); ``#`` lines and blank lines are skipped. Relative names
    start from ``root``, default the list file's folder.

    Raises:
        ValueError: the file names no video.
    """
    base = root or path.parent
    videos = []
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        name, label = text, None
        parts = text.rsplit(",", 1) if "," in text else text.rsplit(None, 1)
        if len(parts) == 2 and parts[1].strip().lstrip("-").isdigit():
            name, label = parts[0].strip(), int(parts[1])
        full = Path(name) if Path(name).is_absolute() else base / name
        videos.append((str(full), label))
    if not videos:
        raise ValueError(f"list file {path} names no video")
    return videos


def collect_videos(paths: Sequence[str], root: str | None = None) -> list[tuple[str, int | None]]:
    """(video path, label or None) for every file, folder (recursively: files with a video
    suffix, sorted) and list file of ``paths``, in the order given.

    Raises:
        FileNotFoundError: a path that does not exist (named).
        ValueError: a list file that names no video.
    """
    videos: list[tuple[str, int | None]] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES)
            if not found:
                log.warning("no video files (%s) under %s", ", ".join(sorted(VIDEO_SUFFIXES)), path)
            videos += [(str(p), None) for p in found]
        elif path.is_file() and path.suffix.lower() in LIST_SUFFIXES:
            videos += read_list_file(path, Path(root) if root else None)
        elif path.is_file():
            videos.append((str(path), None))
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return videos
