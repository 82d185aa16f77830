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
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from dna_video.data.datamodule import Catalog, ProtocolDataModule
from dna_video.data.smarthome import SUBJECTS, SmarthomeName, smarthome_catalog, smarthome_protocol
from dna_video.data.video import write_video

log = logging.getLogger(__name__)

__all__ = ["SYNTHETIC_CLASSES", "generate_synthetic_dataset", "render_video", "write_long_video", "SyntheticSmarthome"]

# Class names in label order. Names follow Smarthome's `Coarse.Fine` style (no `_`).
SYNTHETIC_CLASSES = ("Blink", "Change.Size", "Move.Circle", "Move.Line", "Stay")
GENERATOR_VERSION = 8
MANIFEST = "synthetic.json"


def _shape_mask(kind: int, yy: np.ndarray, xx: np.ndarray, cy: float, cx: float, r: float) -> np.ndarray:
    dy, dx = yy - cy, xx - cx
    if kind == 0:  # disc
        return dy * dy + dx * dx <= r * r
    if kind == 1:  # square
        return (np.abs(dy) <= r * 0.85) & (np.abs(dx) <= r * 0.85)
    return (dy <= r * 0.7) & (np.abs(dx) <= (dy + r) * 0.6)  # triangle pointing up


def _actor_track(label: int, t: np.ndarray, rng: np.random.Generator, h: int, w: int):
    """Centre (y, x) and radius of the actor at normalised times ``t`` in [0, 1].

    Everything happens near the centre, at a scale set by the frame height, so that a
    training crop (short-side jitter then a square crop) keeps the whole path in view while
    it still spans several patches. Directions and phases are random within a class (up or
    down, left or right, clockwise or not...), so no class can be told from one frame or
    from a flip."""
    r0 = rng.uniform(0.1, 0.13) * h
    cy0, cx0 = h / 2 + rng.uniform(-0.1, 0.1) * h, w / 2 + rng.uniform(-0.1, 0.1) * h
    cls = SYNTHETIC_CLASSES[label]
    r = np.full_like(t, r0)
    cy, cx = np.full_like(t, cy0), np.full_like(t, cx0)
    wobble = rng.normal(0, 1.0, t.shape).cumsum() * 0.1
    sign = rng.choice([-1.0, 1.0])
    cycles = rng.uniform(1.0, 1.5)
    wave = 0.5 * (1 - np.cos(2 * np.pi * cycles * t + rng.uniform(0, np.pi)))  # in [0, 1]
    if cls == "Blink":
        # In place, hidden (radius 0) for half of each period of 10 to 16 frames.
        period = rng.uniform(10, 16) / (len(t) - 1)
        r = np.where(((t / period + rng.uniform(0, 1)) % 1.0) < 0.5, r0, 0.0)
    elif cls == "Change.Size":
        small, large = rng.uniform(0.04, 0.05) * h, rng.uniform(0.22, 0.26) * h
        r = small + (large - small) * wave
    elif cls == "Move.Circle":
        turn = sign * 2 * np.pi * rng.uniform(0.8, 1.1)
        phase = rng.uniform(0, 2 * np.pi)
        rad = rng.uniform(0.2, 0.24) * h
        cy, cx = h / 2 + rad * np.sin(phase + turn * t), w / 2 + rad * np.cos(phase + turn * t)
    elif cls == "Move.Line":
        along = h / 2 + sign * rng.uniform(0.5, 0.6) * h * (t - 0.5)
        if rng.random() < 0.5:
            cy, cx = along, cx0 + wobble
        else:
            cy, cx = cy0 + wobble, along - h / 2 + w / 2
    elif cls == "Stay":
        cy, cx = cy0 + wobble, cx0 + wobble[::-1]
    return cy, cx, r


def scene_start(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first draws of every synthetic video, in this order: its length, then its
    background (a random colour gradient with fixed texture noise). Returns normalised times
    ``t`` (N,), the pixel grids ``yy``, ``xx`` (H, W) and the background (H, W, 3) float."""
    n = int(rng.integers(40, 57))
    t = np.linspace(0.0, 1.0, n)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    c0, c1 = rng.uniform(0, 120, 3), rng.uniform(0, 120, 3)
    ramp = (xx / width * 0.6 + yy / height * 0.4)[..., None]
    background = c0 * (1 - ramp) + c1 * ramp + rng.normal(0, 8, (height, width, 3))
    return t, yy, xx, background


def render_video(label: int, seed: int, height: int = 84, width: int = 112) -> np.ndarray:
    """Frames (N, H, W, 3) uint8 of one synthetic video of class ``label``."""
    rng = np.random.default_rng(seed)
    t, yy, xx, background = scene_start(rng, height, width)
    n = len(t)
    kind, distractor_kind = rng.integers(0, 3, 2)
    colour = rng.uniform(150, 255, 3)
    distractor_colour = rng.uniform(120, 255, 3)
    cy, cx, r = _actor_track(label, t, rng, height, width)
    # Distractor: a smaller shape on a smooth random walk, reflected at the borders.
    velocity = rng.normal(0, 1.0, (n, 2)).cumsum(0) * 0.2
    pos = np.array([rng.uniform(0.2, 0.8) * height, rng.uniform(0.2, 0.8) * width]) + velocity.cumsum(0)
    pos = np.abs((pos + [height, width]) % (2 * np.array([height, width])) - [height, width])
    d_radius = rng.uniform(0.05, 0.07) * height

    frames = np.empty((n, height, width, 3), np.uint8)
    for i in range(n):
        img = background.copy()
        img[_shape_mask(distractor_kind, yy, xx, pos[i, 0], pos[i, 1], d_radius)] = distractor_colour
        if r[i] > 0:
            img[_shape_mask(kind, yy, xx, cy[i], cx[i], r[i])] = colour
        frames[i] = np.clip(img, 0, 255).astype(np.uint8)
    return frames


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


def _video_plan(seed: int, videos_per_subject_class: int) -> list[tuple[SmarthomeName, int, int]]:
    """(name, label, per-video seed) of every video, deterministic from ``seed``."""
    rng = np.random.default_rng(seed)
    subjects = sorted(SUBJECTS)
    plan = []
    for label, activity in enumerate(SYNTHETIC_CLASSES):
        for subject in subjects:
            for occurrence in range(videos_per_subject_class):
                camera = int(rng.integers(1, 8))
                name = SmarthomeName(activity, subject, occurrence, 1 + occurrence % 3, camera)
                plan.append((name, label, int(rng.integers(2**31))))
    return plan


def _write_one(args: tuple[str, int, int, int, int]) -> None:
    path, label, seed, height, width = args
    write_video(path, render_video(label, seed, height, width), fps=30.0)


def write_generated_dataset(
    root: Path,
    manifest_name: str,
    params: dict,
    write_one: Callable[[tuple], None],
    jobs_in: Callable[[Path], list[tuple]],
    workers: int | None = None,
) -> Path:
    """Write a generated dataset under ``root`` unless its manifest ``manifest_name`` there
    records the same ``params``: ``write_one`` runs on each job of ``jobs_in(folder)``, in
    ``workers`` processes (None: one per core).

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
    (tmp / manifest_name).write_text(json.dumps(params, indent=1))
    tmp.rename(root)
    return root


def _parameters(videos_per_subject_class: int, seed: int, height: int = 84, width: int = 112) -> dict:
    """What a generated dataset's manifest records: the same parameters write the same videos."""
    return dict(
        version=GENERATOR_VERSION, videos_per_subject_class=videos_per_subject_class,
        seed=seed, height=height, width=width, classes=list(SYNTHETIC_CLASSES),
    )


def generate_synthetic_dataset(
    root: str | os.PathLike,
    videos_per_subject_class: int = 6,
    seed: int = 0,
    height: int = 84,
    width: int = 112,
    workers: int | None = None,
) -> Path:
    """Write the dataset under ``root`` unless it is already there with the same parameters
    (:func:`write_generated_dataset`)."""
    params = _parameters(videos_per_subject_class, seed, height, width)
    plan = _video_plan(seed, videos_per_subject_class)
    return write_generated_dataset(
        Path(root), MANIFEST, params, _write_one,
        lambda folder: [(str(folder / name.filename), label, s, height, width) for name, label, s in plan], workers,
    )


class SyntheticSmarthome(ProtocolDataModule):
    """The synthetic dataset, generated on first use, split by subject like Smarthome CS
    (the same catalog code, with the synthetic classes).

    Args:
        root: folder of the generated videos (created on first use, reused afterwards).
        videos_per_subject_class: videos per (subject, class) pair; 18 subjects, 5 classes.
        seed: generator seed; the same seed writes the same videos.
        strict: a file the generator did not write stops setup (false: left out, counted).
        kwargs: everything :class:`VideoDataModule` takes (batch size, sampling, transforms).
    """

    protocol = replace(smarthome_protocol("cs"), classes=tuple(SYNTHETIC_CLASSES))

    def __init__(
        self,
        root: str = ".cache/synthetic_smarthome",
        videos_per_subject_class: int = 6,
        seed: int = 0,
        strict: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(root=root, strict=strict, **kwargs)
        self.videos_per_subject_class = videos_per_subject_class
        self.seed = seed

    def prepare_data(self) -> None:
        generate_synthetic_dataset(self.root, self.videos_per_subject_class, self.seed)

    def manifest(self) -> tuple[str, dict]:
        """The generated dataset's manifest file name and the parameters it must record."""
        return MANIFEST, _parameters(self.videos_per_subject_class, self.seed)

    def check_inputs(self, stage: str) -> None:
        """As :meth:`VideoDataModule.check_inputs` once the dataset is there; before that, a
        root that holds something else stops the command, and an absent one is announced
        (a mistyped root would otherwise fill a new folder without a word)."""
        root = Path(self.root)
        name, parameters = self.manifest()
        manifest = root / name
        if manifest.is_file() and json.loads(manifest.read_text()) == parameters:
            return super().check_inputs(stage)
        if root.exists() and not manifest.is_file():
            raise FileExistsError(
                f"data.init_args.root {root} exists but holds no {name}: not a generated dataset folder; "
                "choose another root or remove it"
            )
        videos = len(_video_plan(self.seed, self.videos_per_subject_class))
        log.warning("data.init_args.root %s %s: generating the synthetic dataset there (%d videos) before the run. "
                    "If you meant a dataset you have, check the root", root.resolve(),
                    "holds another version of it" if root.exists() else "does not exist", videos)

    def list_files(self) -> tuple[list[Path], str]:
        return sorted(Path(self.root).glob("*.mp4")), str(self.root)

    def make_catalog(self, files: list[Path]) -> Catalog:
        return smarthome_catalog(files, self.protocol, known_activities=set(SYNTHETIC_CLASSES))
