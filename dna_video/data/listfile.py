"""Custom datasets from annotation list files: ``path label`` per line, plus a class-names file.

The format official TimeSformer and MMAction2 users already have for their own data: one
video a line, a path (relative to ``root``, or absolute) and an integer label, separated by
a space or a comma. Paths may hold spaces (the label is the last field).
"""

from __future__ import annotations

import logging
from pathlib import Path

from .datamodule import VideoDataModule
from .dataset import VideoRecord
from .protocols import DATA_DIR, read_class_names

log = logging.getLogger(__name__)

__all__ = ["VideoListDataModule", "read_video_list"]


def read_video_list(list_file: str | Path, root: str | Path, num_classes: int) -> list[VideoRecord]:
    """Records of a list file; a malformed line or a label outside [0, num_classes) is an
    error naming the file and line. Blank lines and lines starting with ``#`` are skipped."""
    list_file = Path(list_file)
    if not list_file.is_file():
        raise FileNotFoundError(f"list file {list_file} not found")
    records = []
    for number, line in enumerate(list_file.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.rsplit(",", 1) if "," in text else text.rsplit(None, 1)
        if len(parts) != 2 or not parts[0].strip():
            raise ValueError(f"{list_file}:{number}: expected `path label`, got {text!r}")
        path, label = parts[0].strip(), parts[1].strip()
        try:
            index = int(label)
        except ValueError:
            raise ValueError(f"{list_file}:{number}: label {label!r} is not an integer") from None
        if not 0 <= index < num_classes:
            raise ValueError(
                f"{list_file}:{number}: label {index} outside [0, {num_classes}) (the class-names file has "
                f"{num_classes} names)"
            )
        full = Path(path) if Path(path).is_absolute() else Path(root) / path
        records.append(VideoRecord(str(full), index))
    return records


class VideoListDataModule(VideoDataModule):
    """Any video dataset described by list files (``path label`` per line).

    Args:
        root: folder the list files' paths are relative to.
        classes: class-names file, one name a line, line i = label i (a path, or the name of
            a list in the repository's ``data/`` folder).
        train_list: list file of the training videos.
        val_list: list file of the validation videos (None: validate on ``test_list``).
        test_list: list file of the test videos (None: test on ``val_list``).
        kwargs: everything :class:`VideoDataModule` takes (batch size, sampling, transforms).
    """

    def __init__(
        self,
        root: str,
        classes: str,
        train_list: str | None = None,
        val_list: str | None = None,
        test_list: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(root=root, **kwargs)
        if val_list is None and test_list is None:
            raise ValueError("give val_list or test_list (or both): one is needed to evaluate")
        self.classes_file = classes
        # A path of its own, or a class list of the repository's data/ folder.
        if Path(classes).is_file():
            self._class_names = read_class_names(Path(classes).resolve())
        elif (DATA_DIR / classes).is_file():
            self._class_names = read_class_names(classes)
        else:
            raise FileNotFoundError(
                f"class names file {classes} not found (looked for {Path(classes).resolve()} and "
                f"{DATA_DIR / classes}): set data.init_args.classes to a file with one class name a line"
            )
        self.lists = {"train": train_list, "val": val_list or test_list, "test": test_list or val_list}
        if val_list is None or test_list is None:
            log.info("list files: %s", "validating on the test list" if val_list is None else "testing on the val list")

    @property
    def class_names(self) -> list[str]:
        return list(self._class_names)

    def build_split(self, split: str) -> list[VideoRecord]:
        list_file = self.lists[split]
        if list_file is None:
            raise ValueError(f"no {split}_list given: set data.init_args.{split}_list")
        return read_video_list(list_file, self.root, self.num_classes)
