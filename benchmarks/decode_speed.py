"""Decode time per clip: 1080p MPEG-4 AVI (NTU RGB+D's format) against the H.264 mp4 copies
written by ``python -m dna_video.tools.prepare --transcode``, measured side by side in one run.

    python -m benchmarks.decode_speed                       # 4 files of 4 s, short sides 256, 320 and 540
    python -m benchmarks.decode_speed --files 8 --seconds 3 --repeats 20

Each file is a generated 1920x1080, 30 fps MPEG-4 Part 2 AVI (a static camera: smooth
background with sensor noise and moving shapes; 8 Mbit/s, a keyframe every 12 frames as
ffmpeg's mpeg4 encoder defaults to). A clip is what
training reads: 8 frames at sampling rate 32 (30 fps), random start, decoded by the same
``read_frames`` the dataset uses (decord, one thread). Reported: median milliseconds per
clip and the ratio AVI / mp4.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from dna_video.data.sampling import FrameSampler
from dna_video.data.video import read_frames, transcode_video, write_video

from .harness import interleaved


def write_1080p_avi(path: Path, seconds: float, seed: int, fps: int = 30) -> None:
    """A static-camera indoor-like scene: a smooth background with mild sensor noise, and
    two shapes that move across it; MPEG-4 Part 2 at 8 Mbit/s, a keyframe every 12 frames."""
    rng = np.random.default_rng(seed)
    h, w = 1080, 1920
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c0, c1 = rng.uniform(40, 200, 3), rng.uniform(40, 200, 3)
    ramp = (xx / w * 0.7 + yy / h * 0.3)[..., None]
    background = c0 * (1 - ramp) + c1 * ramp

    def frames():  # one at a time: the whole clip would not fit in memory
        for i in range(int(seconds * fps)):
            frame = background + rng.normal(0, 2.0, (h, w, 1))
            person = ((yy - 600 - 80 * np.sin(i / 10)) / 300) ** 2 + ((xx - 400 - 15 * i) / 120) ** 2 < 1
            cup = (np.abs(yy - 500 + 4 * i) < 40) & (np.abs(xx - 1300) < 30)
            frame[person] = (90, 60, 50)
            frame[cup] = (230, 230, 240)
            yield np.clip(frame, 0, 255).astype(np.uint8)

    write_video(str(path), frames(), fps=fps, codec="mpeg4", gop=12, bit_rate=8_000_000)


def read_clips(paths: list[Path], sampler: FrameSampler, rng: np.random.Generator) -> None:
    """One training clip (random start) of every file, as the dataset reads it."""
    for path in paths:
        read_frames(str(path), lambda n, fps: sampler.train_indices(n, fps, rng))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--short-sides", type=int, nargs="+", default=[256, 320, 540])
    args = parser.parse_args()

    sampler = FrameSampler(num_frames=8, sampling_rate=32, target_fps=30.0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        avis = [tmp / f"S001C00{1 + k % 3}P001R001A{k + 1:03d}_rgb.avi" for k in range(args.files)]
        for k, path in enumerate(avis):
            write_1080p_avi(path, args.seconds, seed=k)
        variants = {"1080p MPEG-4 AVI": avis}
        for side in args.short_sides:
            outs = []
            for path in avis:
                out = tmp / f"{side}" / path.with_suffix(".mp4").name
                out.parent.mkdir(exist_ok=True)
                transcode_video(str(path), str(out), short_side=side, gop=16, crf=23)
                outs.append(out)
            variants[f"H.264 mp4, short side {side}, GOP 16"] = outs
        # Interleaved rounds with medians (the suite's harness); one call reads one clip of
        # every file, so the time per clip is the call's time over the file count.
        # Every variant draws the same sequence of clip starts (its own generator, same seed).
        timings = interleaved(
            {name: (lambda p=paths, rng=np.random.default_rng(0): read_clips(p, sampler, rng))
             for name, paths in variants.items()},
            rounds=args.repeats,
        )
        medians = {name: timings[name].wall / len(paths) * 1000 for name, paths in variants.items()}
        size = {name: sum(p.stat().st_size for p in paths) / len(paths) / 1e6 for name, paths in variants.items()}
        base = next(iter(medians.values()))
        print(f"{args.files} files x {args.seconds:g} s at 30 fps; clip = 8 frames x sampling rate 32; "
              f"{args.repeats} repeats; decord, 1 thread")
        print(f"{'file':42s} {'MB/file':>8s} {'ms/clip':>9s} {'speed-up':>9s}")
        for name, ms in medians.items():
            print(f"{name:42s} {size[name]:8.2f} {ms:9.1f} {base / ms:8.1f}x")


if __name__ == "__main__":
    main()
