"""Custom datasets from annotation list files or from class folders.

* List files: the format official TimeSformer and MMAction2 users already have for their
  own data: one video a line, a path (relative to ``root``, or absolute) and an integer
  label, separated by a space or a comma. Paths may hold spaces (the label is the last
  field). A class-names file gives the labels' names.
* Class folders: ``<split folder>/<class name>/<video>.mp4`` (or ``.avi``), the UCF101 /
  HMDB51 / Kinetics layout, listed by pytorchvideo's ``LabeledVideoPaths``; the class names
  are the folder names, sorted, unless a class-names file fixes their order.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dna_video.data.datamodule import SplitRecords, VideoDataModule
from dna_video.data.dataset import VideoRecord
from dna_video.data.protocols import DATA_DIR, read_class_names

log = logging.getLogger(__name__)

__all__ = ["VideoListDataModule", "class_folder_names", "read_class_folders", "read_video_list"]

# What pytorchvideo's LabeledVideoPaths.from_directory lists; other files are left out, counted.
CLASS_FOLDER_REASON = "not an .mp4/.avi file in a class folder"


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


def class_folder_names(folder: str | Path) -> list[str]:
    """The class folders of a split folder, sorted (the order pytorchvideo numbers them in)."""
    return sorted(p.name for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith("."))


def read_class_folders(folder: str | Path, class_names: list[str]) -> SplitRecords:
    """Records of a split folder of class folders, labelled by the index of their folder's
    name in ``class_names``; files pytorchvideo does not list are counted as left out."""
    from pytorchvideo.data.labeled_video_paths import LabeledVideoPaths  # here: workers never need it

    folder = Path(folder)
    folder_classes = class_folder_names(folder)
    unknown = sorted(set(folder_classes) - set(class_names))
    if unknown:
        raise ValueError(
            f"{folder}: class folders {unknown} are not in the class list ({len(class_names)} names): "
            "add them to the class-names file, or leave data.init_args.classes unset to take the folder names"
        )
    try:
        paths = LabeledVideoPaths.from_directory(str(folder))
    except (AssertionError, FileNotFoundError) as error:  # no videos at all; an empty class folder
        raise ValueError(
            f"{folder}: {error or 'no videos'}. Every class folder needs at least one .mp4 or .avi video "
            f"({folder}/<class name>/<video>.mp4): remove empty class folders"
        ) from None
    label_of = {name: i for i, name in enumerate(class_names)}
    records = []
    for i in range(len(paths)):
        path, info = paths[i]
        # pytorchvideo numbers this folder's own classes; the split's label is the name's.
        records.append(VideoRecord(path, label_of[folder_classes[info["label"]]]))
    listed = {Path(r.path) for r in records}
    left_out = [str(p) for p in sorted(folder.rglob("*"))
                if p.is_file() and not p.name.startswith(".") and p not in listed]
    return SplitRecords(records, {CLASS_FOLDER_REASON: left_out} if left_out else {})


class VideoListDataModule(VideoDataModule):
    """Any video dataset described by list files (``path label`` per line) or class folders
    (``<split folder>/<class name>/<video>.mp4``), one of the two per split.

    Args:
        root: folder the list files' paths are relative to; a split given by a relative
            path that does not exist as given is looked for under it too.
        classes: class-names file, one name a line, line i = label i (a path, or the name of
            a list in dna-video's data folder). Needed with list files; with class folders,
            None takes the folder names of the given splits, sorted.
        train_list: list file of the training videos, or a folder of class folders.
        val_list: the same for validation (None: validate on ``test_list``).
        test_list: the same for test and predict (None: test on ``val_list``).
        kwargs: everything :class:`VideoDataModule` takes (batch size, sampling, transforms).
    """

    def __init__(
        self,
        root: str,
        classes: str | None = None,
        train_list: str | None = None,
        val_list: str | None = None,
        test_list: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(root=root, **kwargs)
        if val_list is None and test_list is None:
            raise ValueError("give val_list or test_list (or both): one is needed to evaluate")
        self.classes_file = classes
        self.lists = {"train": train_list, "val": val_list or test_list, "test": test_list or val_list}
        if classes is not None:
            self._class_names = _read_class_file(classes)
        else:
            self._class_names = self._class_names_from_folders()
        if val_list is None or test_list is None:
            log.info("list files: %s", "validating on the test list" if val_list is None else "testing on the val list")

    def _split_path(self, given: str) -> Path:
        """A split's list file or folder: as given, else under ``root``."""
        path = Path(given)
        if not path.exists() and not path.is_absolute() and (Path(self.root) / path).exists():
            return Path(self.root) / path
        return path

    def _class_names_from_folders(self) -> list[str]:
        given = {split: self._split_path(value) for split, value in self.lists.items() if value is not None}
        not_folders = {split: str(path) for split, path in given.items() if not path.is_dir()}
        if not_folders:
            raise ValueError(
                f"data.init_args.classes is unset, so every split must be a folder of class folders, but "
                f"{not_folders} are not folders (looked as given and under root {self.root}): set "
                "data.init_args.classes to a class-names file for list files"
            )
        names = sorted({name for path in given.values() for name in class_folder_names(path)})
        if not names:
            raise ValueError(f"no class folders in {sorted(set(map(str, given.values())))}: expected <split>/<class name>/<video>")
        return names

    @property
    def class_names(self) -> list[str]:
        return list(self._class_names)

    def build_split(self, split: str) -> list[VideoRecord] | SplitRecords:
        given = self.lists[split]
        if given is None:
            raise ValueError(f"no {split}_list given: set data.init_args.{split}_list")
        path = self._split_path(given)
        if path.is_dir():
            return read_class_folders(path, self._class_names)
        return read_video_list(path, self.root, self.num_classes)


def _read_class_file(classes: str) -> list[str]:
    """A class-names file of its own, or one of dna-video's data folder."""
    if Path(classes).is_file():
        return read_class_names(Path(classes).resolve())
    if (DATA_DIR / classes).is_file():
        return read_class_names(classes)
    raise FileNotFoundError(
        f"class names file {classes} not found (looked for {Path(classes).resolve()} and "
        f"{DATA_DIR / classes}): set data.init_args.classes to a file with one class name a line"
    )
