"""Builders of small dataset trees of real video files with the real file-name layouts.

Videos are tiny (64x48, 12 frames) so a whole tree is written in a second or two. Each
builder returns the facts a test needs to compute its expectations independently of the
code under test (activity, subject, camera... per file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from dna_video.data.video import write_video

HEIGHT, WIDTH, FRAMES = 48, 64, 12

# Toyota Smarthome facts, as stated in the dataset reference (not read from data/).
SMARTHOME_SUBJECTS = [2, 3, 4, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 25]
SMARTHOME_CS = {"train": {3, 4, 6, 7, 9, 12, 13, 15, 17}, "val": {19, 25}, "test": {2, 10, 11, 14, 16, 18, 20}}
SMARTHOME_CV = {
    "cv1": {"train": {1}, "val": {5}, "test": {2}},
    "cv2": {"train": {1, 3, 4, 6, 7}, "val": {5}, "test": {2}},
}
SMARTHOME_CV_CLASSES = [
    "Cutbread", "Drink.Frombottle", "Drink.Fromcan", "Drink.Fromcup", "Drink.Fromglass", "Eat.Attable",
    "Eat.Snack", "Enter", "Getup", "Leave", "Pour.Frombottle", "Pour.Fromcan", "Readbook", "Sitdown",
    "Takepills", "Uselaptop", "Usetablet", "Usetelephone", "Walk",
]
NTU_CS_TRAIN = {1, 2, 4, 5, 8, 9, 13, 14, 15, 16, 17, 18, 19, 25, 27, 28, 31, 34, 35, 38}


def clip_frames(seed: int, n: int = FRAMES, height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    """(n, H, W, 3) uint8: a horizontal ramp whose brightness grows over time, plus noise, so
    that crops and frames can be told apart after decoding."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 120, width)[None, :, None]
    frames = np.empty((n, height, width, 3), np.uint8)
    for i in range(n):
        level = ramp + 100 * i / max(n - 1, 1) + rng.normal(0, 3, (height, width, 3))
        frames[i] = np.clip(level, 0, 255).astype(np.uint8)
    return frames


@dataclass(frozen=True)
class SmarthomeFile:
    name: str
    activity: str
    subject: int
    camera: int


def build_smarthome_tree(root: Path) -> dict:
    """A Toyota Smarthome clip folder: every subject and camera, 7 activities (one outside
    the 31 classes, two outside the CV classes), plus files every loader must leave out.

    Returns {"valid": [SmarthomeFile...], "unknown": [...], "malformed": [...], "other": [...]}.
    """
    root.mkdir(parents=True, exist_ok=True)
    valid = []
    for i, subject in enumerate(SMARTHOME_SUBJECTS):
        valid.append(SmarthomeFile(f"Walk_p{subject:02d}_r00_v00_c{1 + i % 7:02d}.mp4", "Walk", subject, 1 + i % 7))
        cam = 1 + (i + 3) % 7
        valid.append(SmarthomeFile(f"Drink.Fromcup_p{subject:02d}_r01_v00_c{cam:02d}.mp4", "Drink.Fromcup", subject, cam))
    for activity, subject, camera in [
        ("Cutbread", 3, 1), ("Cutbread", 10, 2), ("Eat.Attable", 4, 2), ("Eat.Attable", 19, 3),
        ("Cook.Cut", 6, 5), ("WatchTV", 11, 2), ("Pour.Fromcup", 25, 5),
    ]:
        valid.append(SmarthomeFile(f"{activity}_p{subject:02d}_r00_v01_c{camera:02d}.mp4", activity, subject, camera))
    unknown_activity = ["Dance_p03_r00_v00_c01.mp4"]
    unknown_field = ["Walk_p05_r00_v00_c01.mp4", "Walk_p03_r00_v00_c09.mp4"]
    malformed = ["Walk_p03_r00_c01.mp4", "walk video.mp4"]
    other = ["notes.txt"]
    for k, name in enumerate([f.name for f in valid] + unknown_activity + unknown_field + malformed):
        write_video(str(root / name), clip_frames(k))
    (root / "notes.txt").write_text("not a video")
    return {"valid": valid, "unknown_activity": unknown_activity, "unknown_field": unknown_field,
            "malformed": malformed, "other": other}


@dataclass(frozen=True)
class NTUFile:
    relpath: str
    sample: str
    camera: int
    performer: int
    action: int

    @property
    def performance(self):
        return self.sample[:4] + self.sample[8:]  # without the camera


def write_avi(path: Path, frames: np.ndarray, fps: float = 30.0) -> None:
    """MPEG-4 Part 2 in an AVI container, like many NTU RGB+D files."""
    write_video(str(path), frames, fps=fps, codec="mpeg4")


def build_ntu_tree(root: Path) -> dict:
    """An NTU RGB+D folder: setup 1, cameras 1-3, performers 1, 2 (cross-subject train) and
    3, 6 (test), actions 1, 2 and 60 as ``*_rgb.avi``; in a subfolder two transcoded-style
    ``.mp4`` names (with and without ``_rgb``); plus files to leave out.

    Returns {"valid": [NTUFile...], "ntu120": [...], "unknown": [...], "malformed": [...],
    "other": [...]}.
    """
    root.mkdir(parents=True, exist_ok=True)
    valid = []
    for performer in (1, 2, 3, 6):
        for camera in (1, 2, 3):
            for action in (1, 2, 60):
                sample = f"S001C{camera:03d}P{performer:03d}R001A{action:03d}"
                valid.append(NTUFile(f"{sample}_rgb.avi", sample, camera, performer, action))
    valid.append(NTUFile("extra/S002C001P004R002A010.mp4", "S002C001P004R002A010", 1, 4, 10))
    valid.append(NTUFile("extra/S002C003P007R001A010_rgb.mp4", "S002C003P007R001A010", 3, 7, 10))
    ntu120 = ["S018C001P041R001A061_rgb.avi"]
    unknown = ["S001C004P001R001A001_rgb.avi"]
    malformed = ["S001C001P001R001_rgb.avi", "S001C001P001R001A001_depth.avi"]
    other = ["S001C001P001R001A001.skeleton"]
    (root / "extra").mkdir(exist_ok=True)
    for k, rel in enumerate([f.relpath for f in valid] + ntu120 + unknown + malformed):
        path = root / rel
        if path.suffix == ".avi":
            write_avi(path, clip_frames(100 + k))
        else:
            write_video(str(path), clip_frames(100 + k))
    (root / other[0]).write_text("skeleton data")
    return {"valid": valid, "ntu120": ntu120, "unknown": unknown, "malformed": malformed, "other": other}


# ---------------------------------------------------------------------------- broken files


def zero_length(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def truncated(path: Path, good: Path, fraction: float = 0.5) -> Path:
    """The first ``fraction`` of a good file (an mp4 written by PyAV keeps its index at the
    end, so the index is lost)."""
    data = good.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    return path


def corrupt_header(path: Path, good: Path) -> Path:
    """A good file whose first 256 bytes (container header) are overwritten with noise."""
    data = bytearray(good.read_bytes())
    data[:256] = np.random.default_rng(0).integers(0, 256, 256, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return path


def not_a_video(path: Path) -> Path:
    """A PNG image under a video name."""
    from PIL import Image

    Image.fromarray(clip_frames(0)[0]).save(path, format="PNG")
    return path


def damaged_tail(path: Path, frames: np.ndarray, keep: float = 0.8) -> Path:
    """An mp4 with its index at the front whose data after ``keep`` of the file is zeroed
    (a partly written copy): it reports every frame, but the last ones do not decode."""
    write_video(str(path), frames, faststart=True, gop=4)
    data = bytearray(path.read_bytes())
    start = int(len(data) * keep)
    data[start:] = bytes(len(data) - start)
    path.write_bytes(bytes(data))
    return path


def count_frames_pyav(path: Path) -> int:
    """Frames decodable in order, counted independently of dna_video (PyAV)."""
    n = 0
    try:
        with av.open(str(path)) as c:
            for packet in c.demux(c.streams.video[0]):
                n += len(packet.decode())
    except av.error.FFmpegError:
        pass
    return n


# ---------------------------------------------------------------------------- class folders


def build_class_folder_tree(root: Path) -> dict:
    """A class-per-folder dataset (the UCF101 / HMDB51 / Kinetics layout) with a split folder
    each: ``train/<class>/`` holds every class, ``val/<class>/`` lacks ``run`` (so its own
    folder numbering differs from the dataset's), one video is an MPEG-4 AVI, and a few files
    are no .mp4/.avi video in a class folder.

    Returns {"classes": sorted class names, "train": {relpath: class}, "val": {...},
    "left_out": {"train": [relpath...], "val": [...]}}.
    """
    layout = {
        "train": {"walk": ["w1.mp4", "w2.avi"], "jump": ["j1.mp4", "j2.mp4"], "run": ["r1.mp4", "r2.mp4"]},
        "val": {"jump": ["j3.mp4"], "walk": ["w3.mp4", "w4.mp4"]},
    }
    facts: dict = {"classes": ["jump", "run", "walk"], "left_out": {"train": [], "val": []}}
    seed = 0
    for split, classes in layout.items():
        facts[split] = {}
        for name, videos in classes.items():
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for video in videos:
                path = root / split / name / video
                if path.suffix == ".avi":
                    write_avi(path, clip_frames(200 + seed))
                else:
                    write_video(str(path), clip_frames(200 + seed))
                facts[split][f"{split}/{name}/{video}"] = name
                seed += 1
    for extra in ["train/walk/notes.txt", "train/labels.csv", "val/jump/clip.webm"]:
        (root / extra).write_text("not listed")
        facts["left_out"][extra.split("/")[0]].append(extra)
    return facts
