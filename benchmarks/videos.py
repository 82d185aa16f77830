"""Benchmark videos: real encoded files with camera-like content, written once and reused.

The quickstart's synthetic videos (84 x 112, under 2 s, flat colours) decode far faster
than real footage, so the data benchmark writes its own H.264 mp4 files: a textured scene
panning slowly (so that P-frames carry real motion and residuals) with a moving object, at
Toyota Smarthome's 640 x 480. Files are cached under a folder keyed by their parameters and
rebuilt when they change. (1080p AVIs come from ``python -m benchmarks.decode_speed``.)
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.ndimage import zoom

from dna_video.data.video import write_video

__all__ = ["VideoSpec", "render_scene", "make_videos"]


@dataclass(frozen=True)
class VideoSpec:
    """What to write: ``count`` scenes of ``frames`` frames at ``fps``, ``width`` x ``height``,
    each encoded as H.264 mp4 once per keyframe interval in ``gops``."""

    count: int
    frames: int
    height: int
    width: int
    fps: float = 30.0
    gops: tuple[int, ...] = (16,)

    @property
    def name(self) -> str:
        return f"{self.width}x{self.height}_{self.frames}f"


def render_scene(seed: int, frames: int, height: int, width: int) -> np.ndarray:
    """(frames, H, W, 3) uint8: a smooth random texture (cubic upsampling of coarse noise,
    plus fine grain) panning across the frame, and a bright disc moving over it.

    numpy/scipy only: it runs in forked workers, where torch ops after the parent used its
    thread pool can deadlock."""
    rng = np.random.default_rng(seed)
    pad = 64
    coarse = rng.uniform(0, 1, ((height + 2 * pad) // 16 + 1, (width + 2 * pad) // 16 + 1, 3))
    full = (height + 2 * pad, width + 2 * pad)
    texture = zoom(coarse, (full[0] / coarse.shape[0], full[1] / coarse.shape[1], 1), order=3)
    texture = np.clip(texture[: full[0], : full[1]], 0, 1).astype(np.float32) * 200 + 20
    grain = rng.normal(0, 6, (height, width, 3)).astype(np.float32)
    yy, xx = np.mgrid[0:height, 0:width]
    out = np.empty((frames, height, width, 3), np.uint8)
    for i in range(frames):
        s = i / max(frames - 1, 1)
        dy, dx = int(pad * np.sin(2 * np.pi * s)), int(2 * pad * (s - 0.5))
        img = texture[pad + dy: pad + dy + height, pad + dx: pad + dx + width] + grain
        cy, cx = height * (0.3 + 0.4 * s), width * (0.2 + 0.6 * abs(np.sin(3 * s)))
        img[(yy - cy) ** 2 + (xx - cx) ** 2 < (0.08 * height) ** 2] = (240, 200, 60)
        out[i] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def _write(args: tuple[dict[int, str], int, VideoSpec]) -> None:
    paths, seed, spec = args
    frames = render_scene(seed, spec.frames, spec.height, spec.width)
    for gop, path in paths.items():
        write_video(path, frames, fps=spec.fps, gop=gop, crf=23)


def make_videos(root: str | os.PathLike, spec: VideoSpec, workers: int = 2) -> dict[int, list[str]]:
    """Paths of the ``spec.count`` videos under ``root/<spec.name>`` for each keyframe interval,
    written if absent (the manifest records the spec they were written with)."""
    folder = Path(root) / spec.name
    manifest = folder / "videos.json"
    paths = {
        gop: [str(folder / f"gop{gop}" / f"video_{i:03d}.mp4") for i in range(spec.count)] for gop in spec.gops
    }
    if manifest.exists() and json.loads(manifest.read_text()) == json.loads(json.dumps(asdict(spec))):
        return paths
    for gop in spec.gops:
        (folder / f"gop{gop}").mkdir(parents=True, exist_ok=True)
    jobs = [({gop: paths[gop][i] for gop in spec.gops}, i, spec) for i in range(spec.count)]
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_write, jobs))
    manifest.write_text(json.dumps(asdict(spec)))
    return paths
