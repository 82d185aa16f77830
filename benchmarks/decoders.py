"""Section ``decoders``: clips/s of decord, PyAV and torchcodec on long videos.

Files: one generated 30 fps H.264 mp4 per size, 640 x 480 (Toyota Smarthome's) and 1920 x
1080 (NTU RGB+D's camera), a minute and half a minute long by default (``--quick``: 20 and
10 s), a keyframe every 30 frames (one a second, as cameras and phones write), no B-frames;
a textured scene panning in two directions with a moving block, so that P-frames carry real
motion. Written once into the benchmark cache.

A clip is what training reads: 8 frames 32 apart at 30 fps (the paper's recipe), a random
start, through the same ``read_frames`` the datasets call, one decoding thread, each decoder
given the same sequence of starts. Every read opens the file afresh, as a training epoch
does (each video once per epoch): PyAV's per-process table of frame timestamps is cleared
before each clip, so that its scan of the file's packets counts as decord's and
torchcodec's scans at open do. torchcodec runs only where it loads (the ``torchcodec`` extra
and FFmpeg's shared libraries); its rows are left out otherwise, with a line saying why.

    python -m benchmarks --sections decoders
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dna_video.data import decoders
from dna_video.data.sampling import FrameSampler
from dna_video.data.video import read_frames, write_video

from .harness import Row, interleaved, rate_row

__all__ = ["LongVideo", "write_long_video", "run"]

FPS, GOP = 30, 30
LABELS = {"decord": "decord", "pyav": "PyAV", "torchcodec": "torchcodec"}
SAMPLER = FrameSampler(num_frames=8, sampling_rate=32, target_fps=float(FPS))


@dataclass(frozen=True)
class LongVideo:
    height: int
    width: int
    seconds: float

    @property
    def name(self) -> str:
        return f"long_{self.width}x{self.height}_{self.seconds:g}s_gop{GOP}.mp4"


def _scene(spec: LongVideo, seed: int = 0):
    """Frames one at a time (a 1080p minute would not fit in memory): a blocky texture with
    grain, panning on a Lissajous path, and a yellow block bouncing over it."""
    rng = np.random.default_rng(seed)
    h, w, pad, cell = spec.height, spec.width, 64, 32
    coarse = rng.uniform(20, 220, ((h + 2 * pad) // cell + 2, (w + 2 * pad) // cell + 2, 3)).astype(np.float32)
    texture = np.repeat(np.repeat(coarse, cell, 0), cell, 1)[: h + 2 * pad, : w + 2 * pad]
    texture += rng.normal(0, 8, texture.shape).astype(np.float32)
    frames = int(spec.seconds * FPS)
    side = h // 10
    for i in range(frames):
        s = i / max(frames - 1, 1)
        dy, dx = int(pad * np.sin(20 * np.pi * s)), int(pad * np.sin(14 * np.pi * s))
        img = texture[pad + dy: pad + dy + h, pad + dx: pad + dx + w].copy()
        cy, cx = int(h * (0.2 + 0.6 * abs(np.sin(9 * s)))), int(w * (0.2 + 0.6 * abs(np.sin(7 * s))))
        img[max(cy - side, 0): cy + side, max(cx - side, 0): cx + side] = (240, 200, 60)
        yield np.clip(img, 0, 255).astype(np.uint8)


def write_long_video(folder: str | Path, spec: LongVideo) -> str:
    """The video of ``spec`` under ``folder``, written if absent (atomically)."""
    path = Path(folder) / "long_videos" / spec.name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.stem + ".partial.mp4")
        print(f"[decoders: writing {path} once]", file=sys.stderr, flush=True)
        write_video(str(partial), _scene(spec), fps=FPS, gop=GOP, crf=23)
        partial.rename(path)
    return str(path)


def _clips(path: str, decoder: str, count: int, seed: int):
    """``count`` random training clips of ``path`` per call, each from a fresh open."""
    rng = np.random.default_rng(seed)

    def call() -> None:
        for _ in range(count):
            decoders._TABLES.clear()  # every read opens cold, as in an epoch
            read_frames(path, lambda n, fps: SAMPLER.train_indices(n, fps, rng), decoder)

    return call


def run(cache: str, rounds: int = 3, quick: bool = False) -> list[Row]:
    specs = [LongVideo(480, 640, 20 if quick else 60), LongVideo(1080, 1920, 10 if quick else 30)]
    count = 2 if quick else 4
    names = ["decord", "pyav", "torchcodec"]
    for name in list(names):
        if (problem := decoders.decoder_problem(name)) is not None:
            print(f"[decoders: {name} left out: {problem}]", file=sys.stderr, flush=True)
            names.remove(name)
    rows: list[Row] = []
    for spec in specs:
        path = write_long_video(cache, spec)
        # The same seed for every decoder: the same clip starts in the same order.
        times = interleaved({name: _clips(path, name, count, seed=0) for name in names}, rounds=rounds)
        case = (f"random 8-frame clips (sampling rate 32), {spec.width}x{spec.height} H.264 mp4, "
                f"{spec.seconds:g} s at 30 fps, keyframe every {GOP}, 1 thread")
        base = names[0]  # decord, or PyAV where decord does not import
        for name in names[1:]:
            rows.append(rate_row("decoders", case, count, LABELS[name], times[name], LABELS[base], times[base]))
    return rows
