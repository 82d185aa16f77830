"""Section 3: training clips/s of the data pipeline, ours against pytorchvideo's.

Same files, same sampling, same transforms, same loader settings on both sides:

* files: generated 640 x 480, 30 fps, 10 s H.264 mp4 (Toyota Smarthome's resolution), once
  with a keyframe every 16 frames (what the toolkit's synthetic data and a prepared copy use)
  and once every 250 frames (x264's default, as in files straight from a camera pipeline);
* sampling: a random clip of 8 frames 32 apart at 30 fps (the paper's recipe), one clip per
  video per epoch, every video listed ``repeat`` times;
* transforms: short-side jitter [256, 320], random 224 crop, flip, normalise (our
  ``TrainClipTransform`` on both sides; ``pytorchvideo.transforms`` does not import with the
  torchvision in use);
* loader: batch 8, 2 worker processes, a fresh loader per epoch (worker start-up included).

Ours is the toolkit's ``VideoDataModule``: the sampler picks 8 frame indices and decord
decodes only those (seeking from the nearest keyframe). pytorchvideo's
``LabeledVideoDataset`` with a ``random`` clip sampler of 225/30 s (the span of 8 frames 32
apart) decodes every frame of that 7.5 s window, then keeps 8 evenly spaced ones, 32 apart
as ours (its ``UniformTemporalSubsample``, reproduced here since its transforms module
cannot import). It runs twice, measured in the same interleaved rounds as ours: with its
PyAV decoder (its default) and with its decord decoder (``decode_audio=False``; it opens
each reader with decord's default thread count, which ``LabeledVideoDataset`` does not let
a user set, and reads the window with one ``get_batch``).

Then the toolkit alone, end to end, on NTU RGB+D's format: 1920 x 1080 MPEG-4 AVI files
(written by ``python -m benchmarks.decode_speed``, which times the decoding alone) against the same
files after ``python -m dna_video.tools.prepare --transcode`` (H.264 mp4, short side 320, a
keyframe every 16 frames).
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from dna_video import prepare
from dna_video.data.datamodule import VideoDataModule
from dna_video.data.dataset import VideoRecord
from dna_video.data.transforms import TrainClipTransform

from .decode_speed import write_1080p_avi
from .harness import Row, interleaved, rate_row
from .videos import VideoSpec, make_videos

__all__ = ["run"]

NUM_FRAMES, SAMPLING_RATE, FPS = 8, 32, 30.0
SHORT_SIDE, CROP, BATCH, WORKERS = (256, 320), 224, 8, 2
MEAN, STD = (0.45,) * 3, (0.225,) * 3


class FileListData(VideoDataModule):
    """The toolkit's DataModule over a given list of records (every split the same)."""

    def __init__(self, records: list[VideoRecord], num_classes: int, **kwargs) -> None:
        super().__init__(root="", **kwargs)
        self._records = records
        self._num_classes = num_classes

    @property
    def class_names(self) -> list[str]:
        return [str(i) for i in range(self._num_classes)]

    def build_split(self, split: str) -> list[VideoRecord]:
        return self._records


class PytorchvideoTransform:
    """pytorchvideo sample dict -> the same clip as ours: 8 evenly spaced frames of the
    decoded window (``UniformTemporalSubsample``), then our train transform."""

    def __init__(self) -> None:
        self.transform = TrainClipTransform(SHORT_SIDE, CROP, True, MEAN, STD)

    def __call__(self, sample: dict) -> dict:
        video = sample["video"]  # (C, T, H, W) float in [0, 255]
        idx = torch.linspace(0, video.shape[1] - 1, NUM_FRAMES).round().long()
        frames = video[:, idx].permute(1, 0, 2, 3).round().to(torch.uint8)
        return {"video": self.transform(frames), "label": sample["label"]}


def _ours(records: list[VideoRecord]):
    dm = FileListData(
        records, num_classes=max(r.label for r in records) + 1, batch_size=BATCH, num_workers=WORKERS,
        num_frames=NUM_FRAMES, sampling_rate=SAMPLING_RATE, target_fps=FPS, train_short_side=SHORT_SIDE,
        crop_size=CROP, mean=MEAN, std=STD,
    )
    dm.setup("fit")

    def epoch() -> int:
        return sum(batch["video"].shape[0] for batch in dm.train_dataloader())

    return epoch


def _pytorchvideo(records: list[VideoRecord], decoder: str):
    from pytorchvideo.data import LabeledVideoDataset, make_clip_sampler

    def epoch() -> int:
        dataset = LabeledVideoDataset(
            [(r.path, {"label": r.label}) for r in records],
            # The window spanned by our clip: first to last sampled frame, inclusive.
            make_clip_sampler("random", ((NUM_FRAMES - 1) * SAMPLING_RATE + 1) / FPS),
            torch.utils.data.RandomSampler,
            transform=PytorchvideoTransform(),
            decode_audio=False,  # with decord, True opens an AVReader that fails on silent files
            decoder=decoder,
        )
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=WORKERS)
        return sum(batch["video"].shape[0] for batch in loader)

    return epoch


def _epochs(epochs: dict, rounds: int) -> tuple[dict[str, int], dict]:
    """Clips per epoch and interleaved epoch timings: one untimed warm-up epoch of each case
    (reads every file once, so the page cache is warm alike for all, and imports the decoders
    in this process), then ``rounds`` timed epochs each (median). Every epoch, warm-up
    included, starts its own workers, as a training epoch does."""
    counts: dict[str, int] = {}

    def counted(name):
        def run() -> None:
            counts[name] = epochs[name]()
        return run

    times = interleaved({k: counted(k) for k in epochs}, rounds=rounds, warmup=1)
    return counts, times


def _records(paths: list[str], repeat: int) -> list[VideoRecord]:
    return [VideoRecord(p, i % 4) for _ in range(repeat) for i, p in enumerate(paths)]


def run(cache: str, rounds: int = 3, quick: bool = False) -> list[Row]:
    rows: list[Row] = []
    # Clips per epoch a multiple of the batch: our loader drops a last partial batch.
    videos, repeat = (4, 2) if quick else (8, 2)
    videos_by_gop = make_videos(cache, VideoSpec(count=videos, frames=300, height=480, width=640, gops=(16, 250)))
    for gop, paths in videos_by_gop.items():
        records = _records(paths, repeat)
        epochs = {"ours": _ours(records), "pyav": _pytorchvideo(records, "pyav"),
                  "decord": _pytorchvideo(records, "decord")}
        counts, t = _epochs(epochs, rounds)
        assert set(counts.values()) == {len(records)}, counts
        case = f"train clips, 640x480 H.264 mp4, keyframe every {gop}, {len(records)} clips/epoch, 2 workers"
        rows.append(rate_row("data", case, counts["ours"], "ours (decord)", t["ours"], "pytorchvideo (PyAV)",
                             t["pyav"], ">= 2.0", 2.0))
        rows.append(rate_row("data", case, counts["ours"], "ours (decord)", t["ours"], "pytorchvideo (decord)",
                             t["decord"]))
        for row in rows[-2:]:
            row.cpu_ratio = None  # the work is in the worker processes
    rows.append(_avi_vs_prepared(cache, rounds, quick))
    return rows


def _write_avi(path: Path, seed: int) -> None:
    partial = path.with_suffix(".partial.avi")
    write_1080p_avi(partial, seconds=9.0, seed=seed)  # a 256-frame clip fits in 9 s at 30 fps
    partial.rename(path)


def _avi_vs_prepared(cache: str, rounds: int, quick: bool) -> Row:
    count, repeat = (2, 4) if quick else (4, 4)
    folder = Path(cache) / "1080p_avi"
    folder.mkdir(parents=True, exist_ok=True)
    avis = [folder / f"S001C00{1 + k % 3}P001R001A{k + 1:03d}_rgb.avi" for k in range(count)]
    missing = [(p, k) for k, p in enumerate(avis) if not p.exists()]
    if missing:  # numpy and PyAV only in the workers: safe to fork
        with ProcessPoolExecutor(2) as pool:
            list(pool.map(_write_avi, *zip(*missing)))
    mp4s = []
    for avi in avis:
        mp4 = folder / "prepared_320" / avi.with_suffix(".mp4").name
        result = prepare.transcode_file(str(avi), str(mp4), short_side=320, gop=16, crf=23, preset="veryfast")
        if result["status"] not in ("done", "skipped"):
            raise RuntimeError(f"prepare failed on {avi}: {result}")
        mp4s.append(str(mp4))
    avis = [str(p) for p in avis]
    counts, t = _epochs({"avi": _ours(_records(avis, repeat)), "mp4": _ours(_records(mp4s, repeat))}, rounds)
    assert counts["avi"] == counts["mp4"] == count * repeat, counts
    case = f"train clips, 1920x1080 MPEG-4 AVI vs prepared mp4 (short side 320), {count * repeat} clips/epoch, 2 workers"
    row = rate_row("data", case, count * repeat, "ours, prepared mp4", t["mp4"], "ours, original AVI", t["avi"])
    row.cpu_ratio = None
    return row


def default_cache() -> str:
    return os.environ.get("DNA_BENCH_CACHE", ".cache/benchmarks")
