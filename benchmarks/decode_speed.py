"""Decode time per clip: 1080p MPEG-4 AVI (NTU RGB+D's format) against the H.264 mp4 copies
written by ``python -m dna_video.prepare --transcode``, measured side by side in one run.

    python benchmarks/decode_speed.py                       # 4 files of 4 s, short sides 256, 320 and 540
    python benchmarks/decode_speed.py --files 8 --seconds 3 --repeats 20

Each file is a generated 1920x1080, 30 fps MPEG-4 Part 2 AVI (a static camera: smooth
background with sensor noise and moving shapes; 8 Mbit/s, a keyframe every 12 frames as
ffmpeg's mpeg4 encoder defaults to). A clip is what
training reads: 8 frames at sampling rate 32 (30 fps), random start, decoded by the same
``read_frames`` the dataset uses (decord, one thread). Reported: median milliseconds per
clip and the ratio AVI / mp4.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dna_video.data.sampling import FrameSampler  # noqa: E402
from dna_video.data.video import read_frames, transcode_video  # noqa: E402


def write_1080p_avi(path: Path, seconds: float, seed: int, fps: int = 30) -> None:
    """A static-camera indoor-like scene: a smooth background with mild sensor noise, and
    two shapes that move across it."""
    import av

    rng = np.random.default_rng(seed)
    h, w = 1080, 1920
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c0, c1 = rng.uniform(40, 200, 3), rng.uniform(40, 200, 3)
    ramp = (xx / w * 0.7 + yy / h * 0.3)[..., None]
    background = c0 * (1 - ramp) + c1 * ramp
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=Fraction(fps))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.bit_rate = 8_000_000
        stream.codec_context.gop_size = 12
        for i in range(int(seconds * fps)):
            frame = background + rng.normal(0, 2.0, (h, w, 1))
            person = ((yy - 600 - 80 * np.sin(i / 10)) / 300) ** 2 + ((xx - 400 - 15 * i) / 120) ** 2 < 1
            cup = (np.abs(yy - 500 + 4 * i) < 40) & (np.abs(xx - 1300) < 30)
            frame[person] = (90, 60, 50)
            frame[cup] = (230, 230, 240)
            rgb = np.clip(frame, 0, 255).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def time_clips(paths: list[Path], sampler: FrameSampler, repeats: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    times = []
    for _ in range(repeats):
        for path in paths:
            start = time.perf_counter()
            read_frames(str(path), lambda n, fps: sampler.train_indices(n, fps, rng))
            times.append(time.perf_counter() - start)
    return times


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
        for paths in variants.values():  # warm the page cache and the library
            time_clips(paths, sampler, 1, seed=0)
        medians = {}
        # Interleave the variants repeat by repeat so machine load affects them alike.
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for r in range(args.repeats):
            for name, paths in variants.items():
                samples[name] += time_clips(paths, sampler, 1, seed=r)
        for name, times in samples.items():
            medians[name] = statistics.median(times) * 1000
        size = {name: sum(p.stat().st_size for p in paths) / len(paths) / 1e6 for name, paths in variants.items()}
        base = next(iter(medians.values()))
        print(f"{args.files} files x {args.seconds:g} s at 30 fps; clip = 8 frames x sampling rate 32; "
              f"{args.repeats} repeats; decord, 1 thread")
        print(f"{'file':42s} {'MB/file':>8s} {'ms/clip':>9s} {'speed-up':>9s}")
        for name, ms in medians.items():
            print(f"{name:42s} {size[name]:8.2f} {ms:9.1f} {base / ms:8.1f}x")


if __name__ == "__main__":
    main()
