"""Dataset trees of the real datasets' size: every file name, split size and folder layout of
Toyota Smarthome (16,115 clips of the 31 classes plus the 14 ``Pour.Fromcup`` clips of the
public lists) and NTU RGB+D 60 (56,880 ``*_rgb.avi`` files), each file a tiny real video.

What the real datasets are made of (``/work/shared/reference/datasets.md``; the split counts
are also ``expected_videos`` in ``data/*_splits.yaml``):

* Toyota Smarthome: ``<Activity>_pNN_rNN_vNN_cNN.mp4`` in one folder; cross-subject 8,829 /
  1,853 / 5,433 clips (subjects 3 4 6 7 9 12 13 15 17 / 19 25 / the other 7); cross-view 1
  1,877 / 3,539 / 1,901 of the 19 classes camera c02 sees (cameras c01 / c05 / c02), cross-view
  2 7,806 / 3,539 / 1,901 (c01 c03 c04 c06 c07 / c05 / c02); c05 has no Cutbread and no
  Eat.Attable clip; Walk 4,070 clips, Cutbread 45. Which clip has which subject, camera and
  counters is drawn (seeded) within those counts: the per-class counts besides Walk and
  Cutbread are not published, so they fall off geometrically.
* NTU RGB+D 60: ``SsssCcccPpppRrrrAaaa_rgb.avi`` in ``nturgb+d_rgb/``; 316 performances
  (setup, performer, replication), each filmed by 3 cameras doing the 60 actions: 224 of the
  20 cross-subject training performers (40,320 files) and 92 of the other 20 (16,560);
  cross-view 37,920 (cameras 2, 3) / 18,960 (camera 1).

A tree is built once under the benchmark cache and reused (its manifest records what it
holds): one small encoded file (32 x 24 pixels, 48 frames at 30 fps; H.264 mp4 for Smarthome,
MPEG-4 Part 2 AVI for NTU, their formats) hard-linked under every name, so 56,880 files take
one file's bytes and a second or two to make. ``every=k`` keeps every k-th name (the tests
build a few hundred names with the same code).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np

__all__ = ["DATASETS", "smarthome_names", "ntu_names", "build_tree", "full_size_tree", "expected_counts"]

DATASETS = ("toyota_smarthome", "ntu60")

# -- Toyota Smarthome ------------------------------------------------------------------------
SMARTHOME_CLASSES = (
    "Cook.Cleandishes Cook.Cleanup Cook.Cut Cook.Stir Cook.Usestove Cutbread Drink.Frombottle Drink.Fromcan "
    "Drink.Fromcup Drink.Fromglass Eat.Attable Eat.Snack Enter Getup Laydown Leave Makecoffee.Pourgrains "
    "Makecoffee.Pourwater Maketea.Boilwater Maketea.Insertteabag Pour.Frombottle Pour.Fromcan Pour.Fromkettle "
    "Readbook Sitdown Takepills Uselaptop Usetablet Usetelephone Walk WatchTV"
).split()
SMARTHOME_CV_CLASSES = (
    "Cutbread Drink.Frombottle Drink.Fromcan Drink.Fromcup Drink.Fromglass Eat.Attable Eat.Snack Enter Getup "
    "Leave Pour.Frombottle Pour.Fromcan Readbook Sitdown Takepills Uselaptop Usetablet Usetelephone Walk"
).split()
SMARTHOME_CS = {"train": (3, 4, 6, 7, 9, 12, 13, 15, 17), "val": (19, 25), "test": (2, 10, 11, 14, 16, 18, 20)}
SMARTHOME_CS_COUNTS = {"train": 8829, "val": 1853, "test": 5433}
# Clips of the 19 cross-view classes per camera: c01 (CV1 train), c05 (val), c02 (test), and
# c03 c04 c06 c07 together (CV2 train = c01 + these).
SMARTHOME_CV_CAMERAS = {1: 1877, 5: 3539, 2: 1901, (3, 4, 6, 7): 7806 - 1877}
SMARTHOME_TOTAL = 16115
NOT_ON_C05 = ("Cutbread", "Eat.Attable")
POUR_FROMCUP = 14  # in the public split lists, not one of the 31 classes


def _geometric(total: int, k: int, ratio: float) -> list[int]:
    """``k`` counts falling off by ``ratio``, summing to ``total`` exactly."""
    weights = ratio ** np.arange(k)
    counts = np.floor(weights / weights.sum() * total).astype(int)
    counts[: total - counts.sum()] += 1
    return counts.tolist()


def smarthome_names(seed: int = 0) -> list[str]:
    """The 16,129 clip names (16,115 of the 31 classes and 14 Pour.Fromcup), sorted."""
    rng = np.random.default_rng(seed)
    cv_total = sum(SMARTHOME_CV_CAMERAS.values())  # 13,246 clips of the 19 CV classes
    others = [c for c in SMARTHOME_CV_CLASSES if c not in ("Walk", "Cutbread")]
    counts = {"Walk": 4070, "Cutbread": 45}
    counts.update(zip(rng.permutation(others).tolist(), _geometric(cv_total - 4070 - 45, len(others), 0.9)))
    cs_only = [c for c in SMARTHOME_CLASSES if c not in SMARTHOME_CV_CLASSES]
    counts.update(zip(rng.permutation(cs_only).tolist(), _geometric(SMARTHOME_TOTAL - cv_total, len(cs_only), 0.85)))
    assert sum(counts.values()) == SMARTHOME_TOTAL

    # Cameras: the CV classes' clips take exactly the per-camera counts (none of Cutbread and
    # Eat.Attable on c05); the CS-only classes are never on c02 (it sees exactly the 19).
    cv_clips = [c for c in SMARTHOME_CV_CLASSES for _ in range(counts[c])]
    cameras: list[int] = []
    for camera, n in SMARTHOME_CV_CAMERAS.items():
        cameras += [camera] * n if isinstance(camera, int) else [camera[i % len(camera)] for i in range(n)]
    cameras = rng.permutation(cameras).tolist()
    on_c05 = [i for i, c in enumerate(cv_clips) if c in NOT_ON_C05 and cameras[i] == 5]
    swap = iter(i for i, c in enumerate(cv_clips) if c not in NOT_ON_C05 and cameras[i] != 5)
    for i in on_c05:
        j = next(swap)
        cameras[i], cameras[j] = cameras[j], cameras[i]
    clips = list(zip(cv_clips, cameras))
    clips += [(c, int(rng.choice([1, 3, 4, 5, 6, 7]))) for c in cs_only for _ in range(counts[c])]

    # Subjects: the cross-subject split sizes, subjects drawn within each split.
    order = rng.permutation(len(clips))
    subjects = np.empty(len(clips), int)
    start = 0
    for split, n in SMARTHOME_CS_COUNTS.items():
        chosen = order[start: start + n]
        subjects[chosen] = rng.choice(SMARTHOME_CS[split], size=n)
        start += n
    every = SMARTHOME_CS["train"] + SMARTHOME_CS["val"] + SMARTHOME_CS["test"]
    clips = [(c, int(s), cam) for (c, cam), s in zip(clips, subjects)]
    clips += [("Pour.Fromcup", int(rng.choice(every)), int(rng.choice([1, 2, 3, 4, 5, 6, 7]))) for _ in range(POUR_FROMCUP)]

    seen: Counter = Counter()
    names = []
    for activity, subject, camera in clips:
        k = seen[(activity, subject, camera)]
        seen[(activity, subject, camera)] += 1
        names.append(f"{activity}_p{subject:02d}_r{k // 100:02d}_v{k % 100:02d}_c{camera:02d}.mp4")
    return sorted(names)


# -- NTU RGB+D 60 ----------------------------------------------------------------------------
NTU_CS_TRAIN = (1, 2, 4, 5, 8, 9, 13, 14, 15, 16, 17, 18, 19, 25, 27, 28, 31, 34, 35, 38)
NTU_CS_TEST = tuple(p for p in range(1, 41) if p not in NTU_CS_TRAIN)
# (setup, performer) pairs, each filmed twice (replications 1 and 2): 112 x 2 = 224 training
# performances, 46 x 2 = 92 test ones.
NTU_PAIRS = {"train": 112, "test": 46}


def ntu_names(seed: int = 0) -> list[str]:
    """The 56,880 ``*_rgb.avi`` names, sorted."""
    rng = np.random.default_rng(seed)
    pairs = []
    for split, performers in (("train", NTU_CS_TRAIN), ("test", NTU_CS_TEST)):
        every = [(s, p) for s in range(1, 18) for p in performers]
        pairs += [every[i] for i in rng.choice(len(every), NTU_PAIRS[split], replace=False)]
    return sorted(
        f"S{s:03d}C{c:03d}P{p:03d}R{r:03d}A{a:03d}_rgb.avi"
        for s, p in pairs for r in (1, 2) for c in (1, 2, 3) for a in range(1, 61)
    )


# -- trees -----------------------------------------------------------------------------------
LAYOUT = {"toyota_smarthome": ("mp4", smarthome_names), "ntu60": ("nturgb+d_rgb", ntu_names)}


def expected_counts(dataset: str) -> dict[str, dict[str, int]]:
    """protocol -> split -> videos of the full dataset (what a full-size tree must give)."""
    if dataset == "toyota_smarthome":
        return {"cs": dict(SMARTHOME_CS_COUNTS), "cv1": {"train": 1877, "val": 3539, "test": 1901},
                "cv2": {"train": 7806, "val": 3539, "test": 1901}}
    return {"cs": {"train": 40320, "test": 16560}, "cv": {"train": 37920, "test": 18960}}


def _source_video(path: Path, dataset: str) -> None:
    """The one small encoded file every name links to: 32 x 24, 48 frames at 30 fps, a
    gradient that brightens over time (the crops and frames differ)."""
    from dna_video.data.video import write_video

    t = np.arange(48, dtype=np.float32)[:, None, None, None]
    ramp = np.linspace(0, 120, 32, dtype=np.float32)[None, None, :, None]
    frames = np.clip(ramp + 2.5 * t + np.zeros((48, 24, 32, 3), np.float32), 0, 255).astype(np.uint8)
    partial = path.with_name("partial_" + path.name)
    if dataset == "ntu60":
        write_video(str(partial), frames, fps=30, codec="mpeg4", gop=12)
    else:
        write_video(str(partial), frames, fps=30, gop=250)  # x264's default keyframe interval
    partial.rename(path)


def build_tree(folder: Path, names: list[str], source: Path) -> None:
    """``source`` hard-linked into ``folder`` under every name (copied where the file system
    refuses: another device, or the inode's link limit reached, then linked to the copy)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = source
    for name in names:
        path = folder / name
        if path.exists():
            continue
        try:
            os.link(target, path)
        except OSError as exc:
            if exc.errno not in (errno.EMLINK, errno.EXDEV, errno.EPERM):
                raise
            shutil.copyfile(source, path)
            target = path


def full_size_tree(cache: str | os.PathLike, dataset: str, every: int = 1) -> Path:
    """The dataset's video folder under ``cache``, built if absent (``every``: keep every k-th
    name). Returns the folder a DataModule's ``root`` takes."""
    if dataset not in LAYOUT:
        raise ValueError(f"unknown dataset {dataset!r}: use one of {DATASETS}")
    folder_name, names_of = LAYOUT[dataset]
    base = Path(cache) / "full_size" / (dataset if every == 1 else f"{dataset}_every{every}")
    folder = base / folder_name
    manifest = base / "tree.json"
    names = names_of()[::every]
    want = {"dataset": dataset, "every": every, "files": len(names), "version": 1}
    if manifest.exists() and json.loads(manifest.read_text()) == want:
        return folder
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    source = base / ("source.avi" if dataset == "ntu60" else "source.mp4")
    _source_video(source, dataset)
    build_tree(folder, names, source)
    manifest.write_text(json.dumps(want))
    return folder
