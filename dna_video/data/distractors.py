"""The synthetic action dataset with controlled distractors and ground-truth masks: the data
of the denoising experiment (``python -m experiments.denoising``).

Each video holds the actor of :mod:`.synthetic` (its motion defines the class; the same five
classes) drawn with a texture of its own, diagonal stripes, which no distractor ever has, so
the actor stays identifiable whatever the distractors do. The ``level`` sets what the
distractors do:

* ``none``: no distractor (the clean rendering of every video);
* ``random``: ``num_distractors`` shapes on smooth random walks over the whole frame;
* ``confusing``: ``num_distractors`` shapes each performing ANOTHER class's motion, centred
  beside the actor (the "closely associated but misleading" case).

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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np

from dna_video.data.dataset import VideoClipDataset, VideoRecord
from dna_video.data.synthetic import (SYNTHETIC_CLASSES, SyntheticSmarthome, _actor_track, _shape_mask, _video_plan,
                        scene_start, write_generated_dataset)
from dna_video.data.video import write_video


__all__ = ["DISTRACTOR_LEVELS", "render_scene", "generate_distractor_dataset", "mask_path", "read_masks",
           "SyntheticDistractors"]

DISTRACTOR_LEVELS = ("none", "random", "confusing")
GENERATOR_VERSION = 2
MANIFEST = "distractors.json"
MASK_SUFFIX = ".masks.npz"


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


def _stripes(yy: np.ndarray, xx: np.ndarray, period: float) -> np.ndarray:
    """True on the light half of diagonal stripes: the actor's own texture."""
    return ((yy + xx) / period) % 1.0 < 0.5


def render_scene(
    label: int,
    seed: int,
    level: Literal["none", "random", "confusing"] = "none",
    num_distractors: int = 1,
    distractor_size: float = 1.0,
    similarity: float = 0.5,
    height: int = 84,
    width: int = 112,
) -> tuple[np.ndarray, np.ndarray]:
    """Frames (N, H, W, 3) uint8 and masks bool (N, 1 + K, H, W) of one video of class
    ``label`` (K = 0 at level ``none``)."""
    if level not in DISTRACTOR_LEVELS:
        raise ValueError(f"unknown distractor level {level!r}: use one of {DISTRACTOR_LEVELS}")
    if not 0.0 <= similarity <= 1.0:
        raise ValueError(f"similarity must be in [0, 1], got {similarity}")
    rng = np.random.default_rng(seed)
    t, yy, xx, background = scene_start(rng, height, width)
    n = len(t)
    kind = int(rng.integers(0, 3))
    # Two bright stripe colours: a dark stripe would vanish into the (dark) background.
    light, dark = rng.uniform(190, 255, 3), rng.uniform(120, 170, 3)
    stripe = _stripes(yy, xx, period=max(4.0, 0.16 * height))
    cy, cx, r = _actor_track(label, t, rng, height, width)

    # The distractors' own stream: the actor and background above do not depend on the level.
    drng = np.random.default_rng([seed, 1])
    k = 0 if level == "none" else num_distractors
    tracks = []
    for _ in range(k):
        d_kind = kind if drng.random() < similarity else int(drng.choice([s for s in range(3) if s != kind]))
        colour = similarity * light + (1 - similarity) * drng.uniform(120, 255, 3)
        size = distractor_size * drng.uniform(0.1, 0.13) * height
        if level == "random":
            velocity = drng.normal(0, 1.0, (n, 2)).cumsum(0) * 0.2
            pos = np.array([drng.uniform(0.2, 0.8) * height, drng.uniform(0.2, 0.8) * width]) + velocity.cumsum(0)
            pos = np.abs((pos + [height, width]) % (2 * np.array([height, width])) - [height, width])
            dy, dx, dr = pos[:, 0], pos[:, 1], np.full(n, size)
        else:  # another class's motion, beside the actor
            other = int(drng.choice([c for c in range(len(SYNTHETIC_CLASSES)) if c != label]))
            dy, dx, dr = _actor_track(other, t, drng, height, width)
            dr = dr * distractor_size
            side = drng.choice([-1.0, 1.0])
            dx = dx + side * drng.uniform(0.25, 0.35) * height
            dy = dy + drng.uniform(-0.1, 0.1) * height
        tracks.append((d_kind, colour, dy, dx, dr))

    frames = np.empty((n, height, width, 3), np.uint8)
    masks = np.zeros((n, 1 + k, height, width), bool)
    for i in range(n):
        img = background.copy()
        for j, (d_kind, colour, dy, dx, dr) in enumerate(tracks):
            if dr[i] <= 0:
                continue
            shape = _shape_mask(d_kind, yy, xx, dy[i], dx[i], dr[i])
            img[shape] = colour
            masks[i, 1: 1 + j] &= ~shape  # a later distractor hides the earlier ones
            masks[i, 1 + j] = shape
        if r[i] > 0:
            actor = _shape_mask(kind, yy, xx, cy[i], cx[i], r[i])
            img[actor & stripe] = light
            img[actor & ~stripe] = dark
            masks[i, 0] = actor
            masks[i, 1:] &= ~actor
        frames[i] = np.clip(img, 0, 255).astype(np.uint8)
    return frames, masks


def _write_one(job: tuple) -> None:
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
) -> Path:
    """Write the videos and their masks under ``root`` unless they are there with the same
    parameters (written to a sibling folder and moved in place: never half a dataset)."""
    root = Path(root)
    params = _parameters(level, num_distractors, distractor_size, similarity, videos_per_subject_class, seed,
                         height, width)
    options = {k: params[k] for k in ("level", "num_distractors", "distractor_size", "similarity", "height", "width")}
    render_scene(0, 0, **options)  # bad options fail here, before any worker starts
    plan = _video_plan(seed, videos_per_subject_class)
    return write_generated_dataset(
        root, MANIFEST, params, _write_one,
        lambda folder: [(str(folder / name.filename), label, s, options) for name, label, s in plan], workers,
    )


def _parameters(level: str, num_distractors: int, distractor_size: float, similarity: float,
                videos_per_subject_class: int, seed: int, height: int, width: int) -> dict:
    """What the manifest of a distractor dataset records."""
    if level == "none":  # the distractor options do not change these videos
        num_distractors, distractor_size, similarity = 0, 1.0, 0.0
    return dict(version=GENERATOR_VERSION, videos_per_subject_class=videos_per_subject_class, seed=seed,
                classes=list(SYNTHETIC_CLASSES), level=level, num_distractors=num_distractors,
                distractor_size=distractor_size, similarity=similarity, height=height, width=width)


class SyntheticDistractors(SyntheticSmarthome):
    """The synthetic dataset with distractors at a chosen level and per-frame ground-truth
    masks (the denoising experiment's data), generated on first use, split like Smarthome CS.

    Args:
        root: folder of the generated videos and masks (one folder per set of options).
        level: ``none``, ``random`` (random walks) or ``confusing`` (another class's motion
            beside the actor).
        num_distractors: distractors per video (levels ``random`` and ``confusing``).
        distractor_size: a distractor's radius relative to the actor's.
        similarity: 0: a random colour and another shape; 1: the actor's stripe colour and
            shape (never its stripes).
        height, width: frame size of the generated videos.
        with_masks: samples carry ``masks`` (1 + K, T, h, w) per clip, (views, 1 + K, T, h, w)
            in evaluation, transformed with the frames.
        videos_per_subject_class, seed, strict, kwargs: as :class:`SyntheticSmarthome`.
    """

    def __init__(
        self,
        root: str = ".cache/synthetic_distractors",
        level: Literal["none", "random", "confusing"] = "none",
        num_distractors: int = 1,
        distractor_size: float = 1.0,
        similarity: float = 0.5,
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
        super().__init__(root=root, videos_per_subject_class=videos_per_subject_class, seed=seed, strict=strict, **kwargs)
        self.scene = dict(level=level, num_distractors=num_distractors, distractor_size=distractor_size,
                          similarity=similarity, height=height, width=width)
        self.with_masks = with_masks

    def prepare_data(self) -> None:
        generate_distractor_dataset(self.root, videos_per_subject_class=self.videos_per_subject_class,
                                    seed=self.seed, **self.scene)

    def manifest(self) -> tuple[str, dict]:
        return MANIFEST, _parameters(videos_per_subject_class=self.videos_per_subject_class, seed=self.seed,
                                     **self.scene)

    def make_dataset(self, split: str, records: list[VideoRecord]) -> VideoClipDataset:
        dataset = super().make_dataset(split, records)
        if self.with_masks:
            dataset.mask_reader = read_masks
        return dataset
