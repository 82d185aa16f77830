"""The synthetic action dataset with controlled distractors and ground-truth masks: the data
of the denoising experiment (``python -m experiments.denoising``).

Each video holds the actor of :mod:`.synthetic` (its motion defines the class; the same five
classes; both renderers live in :mod:`.scenes`) drawn with a texture of its own, diagonal
stripes, which no distractor ever has, so the actor stays identifiable whatever the
distractors do. The ``level`` sets what the distractors do:

* ``none``: no distractor (the clean rendering of every video);
* ``random``: ``num_distractors`` shapes on smooth random walks over the whole frame;
* ``confusing``: ``num_distractors`` shapes each performing ANOTHER class's motion, centred
  beside the actor (the "closely associated but misleading" case);
* ``cue``: one shape beside the actor whose MOTION is a cue to the label (a misleading cue):
  with probability ``cue_rate`` it performs the motion of class pi(y) = (y + 1) mod C for
  the video's label y (so the cue predicts the label), otherwise that of pi(y') for a label
  y' != y drawn uniformly (the cue points to y'). The label the cue points to is the video's
  ``cue_label`` (:func:`cue_label_of`), recorded in the folder's ``cues.json``. A training
  set at ``cue_rate`` 0.9 and a test set at 0 (every video cue-conflicting) make the shift.

``distractor_size`` scales a distractor's radius relative to the actor's; ``similarity`` in
[0, 1] moves its colour from a random one to the actor's stripe colour, and is the chance
that it takes the actor's shape. Actor, background and motion come from the per-video seed
alone and the distractors from a second stream, so every level renders the SAME videos,
with and without distractors: ``level: none`` with the same seed is the distractor-free
rendering of a distractor dataset.

Beside each ``<video>.mp4`` a ``<video>.masks.npz`` holds ``masks``, bool (N, 1 + K, H, W):
per frame, the visible pixels of the actor (index 0) and of each of the K distractors (drawn
under the actor, each over the earlier ones; the masks are disjoint). The DataModule's
``with_masks`` sends them through the clip's frame sampling, resize, crop and flip with the
frames (:class:`~.dataset.VideoClipDataset`).

Both class sets of :mod:`.synthetic` (``classes``: ``target`` or ``source``) and its held-out
test sets (``test_videos``) apply here too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import numpy as np

from dna_video.data.dataset import VideoClipDataset, VideoRecord
from dna_video.data.scenes import DISTRACTOR_LEVELS, class_names_of, cue_label_of, cue_motion, render_scene
from dna_video.data.synthetic import SyntheticSmarthome, _plan, write_generated_dataset
from dna_video.data.video import write_video


__all__ = ["DISTRACTOR_LEVELS", "render_scene", "generate_distractor_dataset", "mask_path", "read_masks",
           "cue_label_of", "cue_motion", "read_cues", "SyntheticDistractors"]

GENERATOR_VERSION = 2
MANIFEST = "distractors.json"
MASK_SUFFIX = ".masks.npz"
CUES = "cues.json"  # level cue: file name -> the label its cue points to


def read_cues(folder: str | os.PathLike) -> dict[str, int]:
    """The cue labels of a ``cue`` dataset folder: file name -> label its cue points to."""
    path = Path(folder) / CUES
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no cue labels in {folder}; only level cue writes them "
                                "(generate the dataset with level: cue)")
    return {name: int(label) for name, label in json.loads(path.read_text()).items()}


def mask_path(video: str | os.PathLike) -> Path:
    """The ground-truth mask file of ``video``: ``clip.mp4`` -> ``clip.masks.npz``."""
    video = Path(video)
    return video.with_name(video.stem + MASK_SUFFIX)


def read_masks(video: str | os.PathLike) -> np.ndarray:
    """The masks of ``video``: bool (N, 1 + K, H, W), actor first."""
    path = mask_path(video)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no ground-truth masks beside {video}; generate the dataset again "
                                "(SyntheticDistractors writes them) or set with_masks=false")
    with np.load(path) as data:
        return np.unpackbits(data["packed"], axis=-1, count=int(data["width"])).astype(bool)


def _write_one(job: tuple) -> None:  # in a worker process: one video and its masks
    path, label, seed, options = job
    frames, masks = render_scene(label, seed, **options)
    write_video(path, frames, fps=30.0)
    # Packed bits along the width: the mask file stays a few kB per video.
    np.savez_compressed(mask_path(path), packed=np.packbits(masks, axis=-1), width=masks.shape[-1])


def generate_distractor_dataset(
    root: str | os.PathLike,
    level: str = "none",
    num_distractors: int = 1,
    distractor_size: float = 1.0,
    similarity: float = 0.5,
    videos_per_subject_class: int = 6,
    seed: int = 0,
    height: int = 84,
    width: int = 112,
    workers: int | None = None,
    cue_rate: float = 0.9,
    classes: str = "target",
    test_videos: int | None = None,
) -> Path:
    """Write the videos and their masks under ``root`` unless they are there with the same
    parameters (written to a sibling folder and moved in place: never half a dataset), in
    ``workers`` processes (None: one per core). Level ``cue`` also writes ``cues.json``.
    ``test_videos``: write instead a held-out test set of that many videos
    (:func:`~.synthetic.heldout_plan`)."""
    root = Path(root)
    params = _parameters(level, num_distractors, distractor_size, similarity, videos_per_subject_class, seed,
                         height, width, cue_rate, classes, test_videos)
    options = dict(level=level, num_distractors=params["num_distractors"], distractor_size=params["distractor_size"],
                   similarity=params["similarity"], height=height, width=width, cue_rate=cue_rate, classes=classes)
    render_scene(0, 0, **options)  # bad options fail here, before any worker starts
    names = class_names_of(classes)
    plan = _plan(seed, videos_per_subject_class, names, test_videos)

    def write_cues(folder: Path) -> None:
        if level == "cue":
            cues = {name.filename: cue_label_of(label, s, cue_rate, len(names)) for name, label, s in plan}
            (folder / CUES).write_text(json.dumps(cues, indent=0, sort_keys=True))

    return write_generated_dataset(
        root, MANIFEST, params, _write_one,
        lambda folder: [(str(folder / name.filename), label, s, options) for name, label, s in plan], workers,
        finish=write_cues,
    )


def _parameters(level: str, num_distractors: int, distractor_size: float, similarity: float,
                videos_per_subject_class: int, seed: int, height: int, width: int, cue_rate: float = 0.9,
                classes: str = "target", test_videos: int | None = None) -> dict:
    """What the manifest of a distractor dataset records (``cue_rate`` at level ``cue`` only,
    ``test_videos`` only when set: the other folders' manifests are as before)."""
    if level == "none":  # the distractor options do not change these videos
        num_distractors, distractor_size, similarity = 0, 1.0, 0.0
    params = dict(version=GENERATOR_VERSION, videos_per_subject_class=videos_per_subject_class, seed=seed,
                  classes=list(class_names_of(classes)), level=level, num_distractors=num_distractors,
                  distractor_size=distractor_size, similarity=similarity, height=height, width=width)
    if level == "cue":
        params["cue_rate"] = cue_rate
    if test_videos is not None:
        params.update(videos_per_subject_class=None, test_videos=test_videos)
    return params


class SyntheticDistractors(SyntheticSmarthome):
    """The synthetic dataset with distractors at a chosen level and per-frame ground-truth
    masks (the denoising experiment's data), generated on first use, split like Smarthome CS.

    Args:
        root: folder of the generated videos and masks (one folder per set of options).
        level: ``none``, ``random`` (random walks), ``confusing`` (another class's motion
            beside the actor) or ``cue`` (one distractor beside the actor whose motion is a
            cue to the label: see ``cue_rate``).
        num_distractors: distractors per video (levels ``random`` and ``confusing``; ``cue``
            has one).
        distractor_size: a distractor's radius relative to the actor's.
        similarity: 0: a random colour and another shape; 1: the actor's stripe colour and
            shape (never its stripes).
        cue_rate: level ``cue``: the probability that the distractor performs the motion of
            class (y + 1) mod 5 for label y (the cue predicts the label); otherwise it performs
            that of (y' + 1) mod 5 for another label y', drawn uniformly (the cue points to
            y'). Per video the label the cue points to is in the folder's ``cues.json`` and
            :meth:`cue_labels`.
        test_cue_rate: ``cue_rate`` of the held-out test set (``test_videos``), e.g. 0 for a
            test set where every cue points to a wrong label; None: ``cue_rate``.
        height, width: frame size of the generated videos.
        with_masks: samples carry ``masks`` (1 + K, T, h, w) per clip, (views, 1 + K, T, h, w)
            in evaluation, transformed with the frames.
        videos_per_subject_class, seed, classes, test_videos, test_root, test_subset, strict,
            kwargs: as :class:`SyntheticSmarthome` (the held-out test set is rendered with
            these options).
    """

    def __init__(
        self,
        root: str = ".cache/synthetic_distractors",
        level: Literal["none", "random", "confusing", "cue"] = "none",
        num_distractors: int = 1,
        distractor_size: float = 1.0,
        similarity: float = 0.5,
        cue_rate: float = 0.9,
        test_cue_rate: float | None = None,
        height: int = 84,
        width: int = 112,
        with_masks: bool = False,
        videos_per_subject_class: int = 6,
        seed: int = 0,
        strict: bool = True,
        **kwargs,
    ) -> None:
        if level not in DISTRACTOR_LEVELS:
            raise ValueError(f"data.init_args.level: unknown distractor level {level!r}; use one of {DISTRACTOR_LEVELS}")
        for key, rate in (("cue_rate", cue_rate), ("test_cue_rate", test_cue_rate)):
            if rate is not None and not 0.0 <= rate <= 1.0:
                raise ValueError(f"data.init_args.{key} is {rate}: give a probability in [0, 1]")
        if level == "cue" and num_distractors != 1:
            raise ValueError(f"data.init_args.num_distractors is {num_distractors}: level cue has one distractor "
                             "(the cue); set 1")
        super().__init__(root=root, videos_per_subject_class=videos_per_subject_class, seed=seed, strict=strict, **kwargs)
        self.scene = dict(level=level, num_distractors=num_distractors, distractor_size=distractor_size,
                          similarity=similarity, height=height, width=width)
        self.cue_rate = cue_rate
        self.test_cue_rate = cue_rate if test_cue_rate is None else test_cue_rate
        self.with_masks = with_masks

    def _cue_rate(self, test_videos: int | None) -> float:
        return self.cue_rate if test_videos is None else self.test_cue_rate

    def folder_parameters(self, test_videos: int | None = None) -> tuple[str, dict]:
        return MANIFEST, _parameters(videos_per_subject_class=self.videos_per_subject_class, seed=self.seed,
                                     cue_rate=self._cue_rate(test_videos), classes=self.classes,
                                     test_videos=test_videos, **self.scene)

    def generate(self, folder: Path, test_videos: int | None = None) -> None:
        generate_distractor_dataset(folder, videos_per_subject_class=self.videos_per_subject_class, seed=self.seed,
                                    cue_rate=self._cue_rate(test_videos), classes=self.classes,
                                    test_videos=test_videos, **self.scene)

    def make_dataset(self, split: str, records: list[VideoRecord]) -> VideoClipDataset:
        dataset = super().make_dataset(split, records)
        if self.with_masks:
            dataset.mask_reader = read_masks
        return dataset

    def cue_labels(self, split: str = "test") -> list[int]:
        """Level ``cue``: per video of ``split`` (set up), in the order of its records (a batch's
        ``index`` is the position here), the label its cue points to. Cue-conflicting videos
        are those where it differs from the label; a prediction follows the cue where it
        equals it."""
        if self.scene["level"] != "cue":
            raise ValueError(f"cue labels exist at level cue only (this dataset's level is {self.scene['level']!r})")
        if split not in self.datasets:
            raise RuntimeError(f"split {split!r} is not set up; call setup() first")
        tables: dict[Path, dict[str, int]] = {}
        labels = []
        for record in self.datasets[split].records:
            path = Path(record.path)
            if path.parent not in tables:
                tables[path.parent] = read_cues(path.parent)
            labels.append(tables[path.parent][path.name])
        return labels
