"""Section: a long video as a timeline (``predict --timeline``): throughput and memory.

* Throughput, in seconds of video per second of wall time, of
  :func:`dna_video.prediction.timeline.video_timeline` (every sampled frame decoded once, in
  order) against the same windows each decoded on its own (``read_frames`` per window, as
  cutting the video into clips would: an overlapping frame is decoded again by every window
  that samples it, and every window seeks). Both run the same network over the same views.
* Peak memory flat in the video's length (1x, 2x, 4x): the peak of what one timeline
  allocates above what was live before, torch tensors (frames held, views, activations:
  :func:`~benchmarks.harness.peak_memory`) plus numpy arrays and Python objects (the decoded
  chunks: ``tracemalloc``); deterministic, unlike the resident set, which the allocator and
  the thread pools move by +-100 MiB from run to run. The 4x / 1x ratio is the row; the video
  decoded whole would grow 4x. The resident set is reported too (peak of a fresh process per
  length, imports included), without a target.

The model is the quickstart's geometry (``arch: tiny``, width 64, depth 4, 8 frames 5 apart at
30 fps, 3 crops of 64) with random weights: speed and memory do not depend on what it learned.
The videos: 320x240, 30 fps H.264 (keyframe every 16 frames), a textured scene panning with a
moving object (:func:`benchmarks.videos.render_scene`, 10 s pieces, written piece by piece).

    python -m benchmarks --sections timeline          # 20 s / 40 s / 80 s videos
    python -m benchmarks --sections timeline --quick  # 10 s / 20 s / 40 s
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import torch

from dna_video.data.eval_settings import EvalSettings
from dna_video.prediction.torch_backend import TorchModel
from dna_video.data.video import write_video

from .harness import Row, interleaved, peak_memory
from .videos import render_scene

__all__ = ["run", "quickstart_sized_model", "write_long_scene"]

HEIGHT, WIDTH, FPS, PIECE = 240, 320, 30.0, 300
CLASSES = ["Blink", "Change.Size", "Move.Circle", "Move.Line", "Stay"]


def quickstart_sized_model(seed: int = 0) -> TorchModel:
    """The quickstart's network and evaluation settings, random weights."""
    from dna_video.models.timesformer import TimeSformerSpec

    torch.manual_seed(seed)
    net = TimeSformerSpec(arch="tiny").build(num_classes=len(CLASSES), num_frames=8, img_size=64).eval()
    settings = EvalSettings(num_frames=8, sampling_rate=5, target_fps=30.0, crop_size=64, num_clips=1, num_crops=3)
    return TorchModel(net, list(CLASSES), settings, "logits", "quickstart-sized (random weights)", "benchmark")


def write_long_scene(path: Path, seconds: int) -> Path:
    """A ``seconds``-long 320x240 video, written once (10 s pieces: never whole in memory)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    pieces = -(-int(seconds * FPS) // PIECE)
    frames = (frame for k in range(pieces) for frame in render_scene(k, PIECE, HEIGHT, WIDTH))
    partial = path.with_name(f".{path.stem}.partial.mp4")
    write_video(str(partial), frames, fps=FPS, gop=16, crf=23)
    partial.rename(path)
    return path


def _per_window(model: TorchModel, path: str) -> float:
    """The same windows, each decoded on its own (``read_frames``), through the same network."""
    from dna_video.prediction.windows import plan_windows
    from dna_video.data.transforms import EvalClipTransform
    from dna_video.data.video import probe_video, read_frames
    from dna_video.tasks.views import mean_view_probs

    settings = model.settings
    n, fps = probe_video(path)
    windows = plan_windows(n, fps, settings.sampler)
    transform = EvalClipTransform(settings.crop_size, settings.num_crops, settings.mean, settings.std)
    batch = []
    with torch.no_grad():
        for w in range(len(windows)):
            frames = read_frames(path, lambda n, fps: windows.indices[w]).frames
            batch.append(transform(torch.from_numpy(frames).permute(0, 3, 1, 2)))
            if len(batch) == 10 or w == len(windows) - 1:
                views = torch.stack(batch)
                mean_view_probs(model.net(views.flatten(0, 1)).unflatten(0, views.shape[:2]), model.aggregate)
                batch.clear()
    return windows.end_s[-1]


def _data_peak(model: TorchModel, path: str) -> tuple[int, int]:
    """Peak bytes one timeline allocates above what was live before: torch tensors (frames
    held, views, activations: :func:`~benchmarks.harness.peak_memory`) and numpy arrays and
    Python objects (the decoded chunks: ``tracemalloc``), each from its own run."""
    from dna_video.prediction.timeline import video_timeline

    tensors = peak_memory(lambda: video_timeline(model, path))
    gc.collect()
    tracemalloc.start()
    try:
        video_timeline(model, path)
        arrays = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return tensors, arrays


def _rss_child(path: str) -> None:
    """In a fresh process: the timeline of ``path``, then the process's peak resident set."""
    from dna_video.prediction.timeline import video_timeline

    video_timeline(quickstart_sized_model(), path)
    with open("/proc/self/status") as f:
        print(next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")))


def _peak_rss(path: Path) -> int:
    result = subprocess.run([sys.executable, "-m", "benchmarks.timeline", "--rss-child", str(path)],
                            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return int(result.stdout.strip().splitlines()[-1])


def run(cache: str, rounds: int = 3, quick: bool = False) -> list[Row]:
    from dna_video.prediction.timeline import video_timeline

    base = 10 if quick else 20
    folder = Path(cache) / "timeline"
    videos = {k: write_long_scene(folder / f"scene_{base * k}s.mp4", base * k) for k in (1, 2, 4)}
    model = quickstart_sized_model()
    one = str(videos[1])
    times = interleaved({"ours": lambda: video_timeline(model, one), "per window": lambda: _per_window(model, one)},
                        rounds=max(1, rounds // 2) if quick else rounds)
    case = f"timeline, quickstart-sized model, {WIDTH}x{HEIGHT} 30 fps H.264, {base} s, stride half the window"
    rows = [Row("timeline", case, "video s/s", "ours (each frame decoded once)", base / times["ours"].wall,
                "each window decoded on its own", base / times["per window"].wall,
                cpu_ratio=times["per window"].cpu / times["ours"].cpu)]
    peaks = {k: _data_peak(model, str(path)) for k, path in videos.items()}
    mib = {k: sum(p) / 2**20 for k, p in peaks.items()}
    for k in (2, 4):
        whole = base * k * FPS * HEIGHT * WIDTH * 3 / 2**20
        rows.append(Row("timeline", f"peak data memory of one timeline (tensors + numpy arrays), {base * k} s vs "
                                    f"{base} s video (the {base * k} s decoded whole: {whole:.0f} MiB)",
                        "MiB", f"{base * k} s", mib[k], f"{base} s", mib[1], "<= 1.1 (flat)", mib[k] <= 1.1 * mib[1]))
    rss = {k: _peak_rss(videos[k]) / 2**20 for k in (1, 4)}
    rows.append(Row("timeline", f"peak RSS of a process running one timeline (imports and allocator included), "
                                f"{base * 4} s vs {base} s video", "MiB", f"{base * 4} s", rss[4], f"{base} s", rss[1]))
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rss-child"]:
        _rss_child(sys.argv[2])
    else:
        from .harness import markdown_table

        print(markdown_table(run(os.environ.get("DNA_BENCH_CACHE", ".cache/benchmarks"), quick="--quick" in sys.argv)))
