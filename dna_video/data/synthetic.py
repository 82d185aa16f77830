"""A small synthetic action dataset written as real H.264 mp4 files in the Toyota Smarthome
naming layout, and its DataModule (the quickstart's data).

Each video shows an "actor" shape whose motion or change over time defines the class
(blinking, changing size, moving on a circle, moving on a line, or staying still while the
distractor moves), a smaller distractor shape wandering at random, and a textured background. Shape,
colours, positions, directions, phases, length and camera number vary per video, so no
single frame tells the class: a model must compare frames. Every class is closed under
horizontal flips, so the standard training augmentation applies.

Generation is deterministic from ``seed``; the folder records the generator's parameters and
is rebuilt when they change. Splits follow the Smarthome cross-subject protocol (train
subjects without 19 and 25, validation 19 and 25, test the seven test subjects).

Two class sets share the renderer (:mod:`.scenes`, numpy alone): ``target``
(:data:`SYNTHETIC_CLASSES`, the quickstart's and the denoising experiment's) and ``source``
(:data:`SOURCE_CLASSES`: five other motions, no label in common), for pretraining on one task
and fine-tuning on the other.

A held-out test set (``test_videos``) is rendered from per-video seeds of their own stream
(:func:`heldout_plan`), which never meets a seed of a training plan, into a folder of its own.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import hashlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np

from dna_video.data.datamodule import Catalog, ProtocolDataModule, SplitRecords
from dna_video.data.scenes import CLASS_SETS, SOURCE_CLASSES, SYNTHETIC_CLASSES, class_names_of, render_video
from dna_video.data.smarthome import (CS_TEST_SUBJECTS, SUBJECTS, SmarthomeName, smarthome_catalog,
                                      smarthome_protocol)
from dna_video.data.video import write_video

log = logging.getLogger(__name__)

__all__ = ["SYNTHETIC_CLASSES", "SOURCE_CLASSES", "CLASS_SETS", "class_names_of", "generate_synthetic_dataset",
           "heldout_plan", "render_video", "write_long_video", "SyntheticSmarthome"]

GENERATOR_VERSION = 8
MANIFEST = "synthetic.json"
# Held-out seeds lie in [2**31, 2**32): a training plan's lie below (rng.integers(2**31)).
HELDOUT_SEED_BASE = 2**31


def write_long_video(path: str | os.PathLike, labels: Sequence[int], clips_per_segment: int = 3, seed: int = 10_000,
                     height: int = 84, width: int = 112, fps: float = 30.0) -> list[dict]:
    """An untrimmed video at ``path``: segment i is ``clips_per_segment`` synthetic videos of
    class ``labels[i]`` played one after another (seeds from ``seed``, apart from the
    dataset's), written frame by frame (never whole in memory). Returns the truth: one
    ``{"start_s", "end_s", "label", "name"}`` per segment."""
    truth, frame = [], 0

    def frames():
        nonlocal frame
        for i, label in enumerate(labels):
            first = frame
            for k in range(clips_per_segment):
                clip = render_video(label, seed + i * clips_per_segment + k, height, width)
                frame += len(clip)
                yield from clip
            truth.append({"start_s": round(first / fps, 3), "end_s": round(frame / fps, 3), "label": int(label),
                          "name": SYNTHETIC_CLASSES[label]})

    write_video(str(path), frames(), fps=fps)
    return truth


def _video_plan(seed: int, videos_per_subject_class: int,
                classes: Sequence[str] = SYNTHETIC_CLASSES) -> list[tuple[SmarthomeName, int, int]]:
    """(name, label, per-video seed) of every video, deterministic from ``seed``."""
    rng = np.random.default_rng(seed)
    subjects = sorted(SUBJECTS)
    plan = []
    for label, activity in enumerate(classes):
        for subject in subjects:
            for occurrence in range(videos_per_subject_class):
                camera = int(rng.integers(1, 8))
                name = SmarthomeName(activity, subject, occurrence, 1 + occurrence % 3, camera)
                plan.append((name, label, int(rng.integers(2**31))))
    return plan


def heldout_plan(seed: int, num_videos: int,
                 classes: Sequence[str] = SYNTHETIC_CLASSES) -> list[tuple[SmarthomeName, int, int]]:
    """(name, label, per-video seed) of a held-out test set of ``num_videos`` videos.

    Labels take turns (video i has label i mod C, so every class has N / C videos, give or
    take one); names use the test subjects, so the cross-subject protocol puts every video in
    the test split. Per-video seeds come from the stream ``[seed, 2]``, all different, in
    [2**31, 2**32): a training plan's seeds (any ``seed``) lie below 2**31, so no held-out
    video repeats a training one."""
    if num_videos < 1:
        raise ValueError(f"data.init_args.test_videos is {num_videos}: give 1 or more (or null: the root's test split)")
    rng = np.random.default_rng([seed, 2])
    seeds = HELDOUT_SEED_BASE + rng.choice(2**31, size=num_videos, replace=False)
    subjects = sorted(CS_TEST_SUBJECTS)
    plan = []
    for i, video_seed in enumerate(seeds.tolist()):
        label, turn = i % len(classes), i // len(classes)
        subject, occurrence = subjects[turn % len(subjects)], turn // len(subjects)
        name = SmarthomeName(classes[label], subject, occurrence, 1 + occurrence % 3, int(rng.integers(1, 8)))
        plan.append((name, label, int(video_seed)))
    return plan


def _plan(seed: int, videos_per_subject_class: int, classes: Sequence[str], test_videos: int | None):
    """The videos a folder holds: the training plan, or the held-out test set of ``test_videos``."""
    if test_videos is None:
        return _video_plan(seed, videos_per_subject_class, classes)
    return heldout_plan(seed, test_videos, classes)


def _write_one(args: tuple[str, int, int, int, int, str]) -> None:
    path, label, seed, height, width, classes = args
    write_video(path, render_video(label, seed, height, width, classes), fps=30.0)


def write_generated_dataset(
    root: Path,
    manifest_name: str,
    params: dict,
    write_one: Callable[[tuple], None],
    jobs_in: Callable[[Path], list[tuple]],
    workers: int | None = None,
    finish: Callable[[Path], None] | None = None,
) -> Path:
    """Write a generated dataset under ``root`` unless its manifest ``manifest_name`` there
    records the same ``params``: ``write_one`` runs on each job of ``jobs_in(folder)``, in
    ``workers`` processes (None: one per core); then ``finish(folder)`` writes what the
    folder records beside the videos (e.g. a per-video table).

    The files go to a temporary sibling folder first, moved in place at the end, so an
    interrupted run never leaves a half-written dataset behind; a folder without the manifest
    is never overwritten."""
    manifest = root / manifest_name
    if manifest.exists() and json.loads(manifest.read_text()) == params:
        return root
    if root.exists():
        if not manifest.exists():
            raise FileExistsError(
                f"{root} exists but holds no {manifest_name}: not a synthetic dataset folder; "
                "choose another root or remove it"
            )
        log.info("generated dataset parameters changed: rebuilding %s", root)
        shutil.rmtree(root)
    tmp = root.with_name(root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    jobs = jobs_in(tmp)
    log.info("writing %d synthetic videos to %s", len(jobs), root)
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(write_one, jobs, chunksize=16))
    else:
        for job in jobs:
            write_one(job)
    if finish is not None:
        finish(tmp)
    (tmp / manifest_name).write_text(json.dumps(params, indent=1))
    tmp.rename(root)
    return root


def _parameters(videos_per_subject_class: int, seed: int, height: int = 84, width: int = 112,
                classes: str = "target", test_videos: int | None = None) -> dict:
    """What a generated dataset's manifest records: the same parameters write the same videos.
    (``test_videos`` only when set: a training folder's manifest is as before.)"""
    params = dict(
        version=GENERATOR_VERSION, videos_per_subject_class=videos_per_subject_class,
        seed=seed, height=height, width=width, classes=list(class_names_of(classes)),
    )
    if test_videos is not None:
        params.update(videos_per_subject_class=None, test_videos=test_videos)
    return params


def generate_synthetic_dataset(
    root: str | os.PathLike,
    videos_per_subject_class: int = 6,
    seed: int = 0,
    height: int = 84,
    width: int = 112,
    workers: int | None = None,
    classes: str = "target",
    test_videos: int | None = None,
) -> Path:
    """Write the dataset under ``root`` unless it is already there with the same parameters
    (:func:`write_generated_dataset`). ``classes``: ``target`` or ``source``;
    ``test_videos``: write instead a held-out test set of that many videos
    (:func:`heldout_plan`)."""
    params = _parameters(videos_per_subject_class, seed, height, width, classes, test_videos)
    plan = _plan(seed, videos_per_subject_class, class_names_of(classes), test_videos)
    return write_generated_dataset(
        Path(root), MANIFEST, params, _write_one,
        lambda folder: [(str(folder / name.filename), label, s, height, width, classes) for name, label, s in plan],
        workers,
    )


def heldout_root(root: str | os.PathLike, params: dict) -> Path:
    """Where a held-out test set of manifest ``params`` lives by default: beside ``root``,
    named after its size and a digest of its parameters (other options, another folder:
    two test sets never overwrite each other)."""
    root = Path(root)
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:8]
    return root.with_name(f"{root.name}.test{params['test_videos']}-{digest}")


def interleaved_subset(records: list, num_classes: int, k: int) -> list:
    """The first ``k`` of ``records`` taken class by class in turn: the i-th video (in file-name
    order) of class 0, 1, ..., C - 1, then the (i + 1)-th... A fixed, class-balanced subset."""
    by_class = [sorted((r for r in records if r.label == c), key=lambda r: r.path) for c in range(num_classes)]
    turns = max((len(group) for group in by_class), default=0)
    order = [group[i] for i in range(turns) for group in by_class if i < len(group)]
    return order[:k]


class SyntheticSmarthome(ProtocolDataModule):
    """The synthetic dataset, generated on first use, split by subject like Smarthome CS
    (the same catalog code, with the synthetic classes).

    Args:
        root: folder of the generated videos (created on first use, reused afterwards).
        videos_per_subject_class: videos per (subject, class) pair; 18 subjects, 5 classes.
        seed: generator seed; the same seed writes the same videos.
        classes: the class set: ``target`` (Blink, Change.Size, Move.Circle, Move.Line, Stay)
            or ``source`` (Bounce, Grow.Once, Jump, Move.Diagonal, Move.Zigzag: other motions,
            no label in common, for pretraining before fine-tuning on ``target``). The same
            renderer otherwise; a checkpoint records the names.
        test_videos: None: the test split is the root's (the 7 test subjects: 35 x
            ``videos_per_subject_class`` videos). N: the test split is a held-out set of N
            videos instead (N / 5 per class), rendered with the same options from seeds that no
            training video uses, into ``test_root`` (generated on first use).
        test_root: folder of the held-out test set (None: beside ``root``, named after N and a
            digest of its options, e.g. ``synthetic_smarthome.test2000-1a2b3c4d``).
        test_subset: keep only k test videos: the first k taken class by class in turn (the
            i-th video, in file-name order, of each class, then the next): a fixed, balanced
            subset, e.g. 256 for attention maps. None: every test video.
        strict: a file the generator did not write stops setup (false: left out, counted).
        kwargs: everything :class:`VideoDataModule` takes (batch size, sampling, transforms).
    """

    protocol = replace(smarthome_protocol("cs"), classes=tuple(SYNTHETIC_CLASSES))

    def __init__(
        self,
        root: str = ".cache/synthetic_smarthome",
        videos_per_subject_class: int = 6,
        seed: int = 0,
        classes: Literal["target", "source"] = "target",
        test_videos: int | None = None,
        test_root: str | None = None,
        test_subset: int | None = None,
        strict: bool = True,
        **kwargs,
    ) -> None:
        names = class_names_of(classes)
        if test_videos is not None and test_videos < 1:
            raise ValueError(f"data.init_args.test_videos is {test_videos}: give 1 or more, or null (the root's test split)")
        if test_subset is not None and test_subset < 1:
            raise ValueError(f"data.init_args.test_subset is {test_subset}: give 1 or more, or null (every test video)")
        super().__init__(root=root, strict=strict, **kwargs)
        self.protocol = replace(smarthome_protocol("cs"), classes=names)
        self.videos_per_subject_class = videos_per_subject_class
        self.seed = seed
        self.classes = classes
        self.test_videos = test_videos
        self.test_root = test_root
        self.test_subset = test_subset
        self._heldout_catalog: Catalog | None = None

    # -- what a generated folder holds (the distractor dataset overrides these two) ----------
    def folder_parameters(self, test_videos: int | None = None) -> tuple[str, dict]:
        """The manifest file name and the parameters it must record, of the root (None) or of
        the held-out test set of ``test_videos``."""
        return MANIFEST, _parameters(self.videos_per_subject_class, self.seed, classes=self.classes,
                                     test_videos=test_videos)

    def generate(self, folder: Path, test_videos: int | None = None) -> None:
        """Write the root (None) or the held-out test set of ``test_videos`` into ``folder``."""
        generate_synthetic_dataset(folder, self.videos_per_subject_class, self.seed, classes=self.classes,
                                   test_videos=test_videos)

    def manifest(self) -> tuple[str, dict]:
        """The generated dataset's manifest file name and the parameters it must record."""
        return self.folder_parameters(None)

    @property
    def heldout_folder(self) -> Path | None:
        """The folder of the held-out test set (None without ``test_videos``)."""
        if self.test_videos is None:
            return None
        if self.test_root is not None:
            return Path(self.test_root)
        return heldout_root(self.root, self.folder_parameters(self.test_videos)[1])

    def _folders(self) -> list[tuple[Path, int | None]]:
        folders = [(Path(self.root), None)]
        if self.test_videos is not None:
            folders.append((self.heldout_folder, self.test_videos))
        return folders

    def prepare_data(self) -> None:
        for folder, test_videos in self._folders():
            self.generate(folder, test_videos)

    def check_inputs(self, stage: str) -> None:
        """As :meth:`VideoDataModule.check_inputs` once the dataset is there; before that, a
        root that holds something else stops the command, and an absent one is announced
        (a mistyped root would otherwise fill a new folder without a word)."""
        ready = True
        for folder, test_videos in self._folders():
            name, parameters = self.folder_parameters(test_videos)
            manifest = folder / name
            if manifest.is_file() and json.loads(manifest.read_text()) == parameters:
                continue
            ready = False
            key = "root" if test_videos is None else "test_root"
            if folder.exists() and not manifest.is_file():
                raise FileExistsError(
                    f"data.init_args.{key} {folder} exists but holds no {name}: not a generated dataset folder; "
                    "choose another folder or remove it"
                )
            videos = len(_plan(self.seed, self.videos_per_subject_class, self.class_names, test_videos))
            log.warning("data.init_args.%s %s %s: generating the synthetic dataset there (%d videos) before the run. "
                        "If you meant a dataset you have, check the folder", key, folder.resolve(),
                        "holds another version of it" if folder.exists() else "does not exist", videos)
        if ready:
            super().check_inputs(stage)

    def list_files(self) -> tuple[list[Path], str]:
        return sorted(Path(self.root).glob("*.mp4")), str(self.root)

    def make_catalog(self, files: list[Path]) -> Catalog:
        return smarthome_catalog(files, self.protocol, known_activities=set(self.class_names))

    def heldout_catalog(self) -> Catalog:
        """The held-out folder's files sorted by the protocol (all in its test split), once."""
        if self._heldout_catalog is None:
            folder = self.heldout_folder
            catalog = self.make_catalog(sorted(folder.glob("*.mp4")))
            catalog.raise_if_strict(self.strict)
            catalog.log_summary(str(folder))
            catalog.notes.append(f"test split: the held-out set in {folder} ({self.test_videos} videos), "
                                 "not the root's test subjects")
            log.info("%s: %s", self.dataset_name, catalog.notes[-1])
            self._heldout_catalog = catalog
        return self._heldout_catalog

    def build_split(self, split: str) -> SplitRecords:
        if split == "test" and self.test_videos is not None:
            found = self.heldout_catalog().split("test")
        else:
            found = super().build_split(split)
        if split != "test" or self.test_subset is None:
            return found
        if self.test_subset > len(found.records):
            raise ValueError(f"data.init_args.test_subset is {self.test_subset} but the test split holds "
                             f"{len(found.records)} videos: give at most that many (or set test_videos)")
        kept = {r.path for r in interleaved_subset(found.records, self.num_classes, self.test_subset)}
        outside = [r.path for r in found.records if r.path not in kept]
        excluded = {**found.excluded, **({"outside test_subset": outside} if outside else {})}
        return SplitRecords([r for r in found.records if r.path in kept], excluded)
