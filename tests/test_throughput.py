"""The throughput monitor: clips counted by hand, metrics and the log line, on by default in the CLI."""

import logging
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from dna_video.cli import main
from dna_video import throughput
from dna_video.module import VideoClassifier
from dna_video.throughput import ThroughputMonitor


def _batches(n_batches, batch_size, frames=4, size=32, classes=3):
    g = torch.Generator().manual_seed(0)
    return [
        {"video": torch.randn(batch_size, 3, frames, size, size, generator=g),
         "label": torch.randint(0, classes, (batch_size,), generator=g)}
        for _ in range(n_batches)
    ]


def test_counts_clips_and_logs_rate_wait_and_memory(tmp_path, caplog):
    model = VideoClassifier(
        num_classes=3, num_frames=4, img_size=32, arch="tiny", net_kwargs={"embed_dim": 32, "depth": 1, "num_heads": 2},
        lr_scheduler=None,
    )
    monitor = ThroughputMonitor()
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[monitor], default_root_dir=tmp_path,
    )
    loader = DataLoader(_batches(3, 4) + _batches(1, 2), batch_size=None)  # 3 x 4 + 2 clips
    with caplog.at_level(logging.INFO, logger="dna_video.throughput"):
        trainer.fit(model, loader)
    assert monitor._clips == 14
    metrics = trainer.callback_metrics
    assert metrics["perf/epoch_train_clips_per_s"] > 0
    assert 0 <= metrics["perf/data_wait_fraction"] < 1
    assert metrics["perf/peak_memory_gb"] > 0.05  # a Python process with torch loaded
    lines = [r.getMessage() for r in caplog.records if "train clips/s" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("epoch 0: ") and "peak RSS" in lines[0]


def test_cli_enables_it_by_default(synthetic_root, tmp_path):
    cli = main([
        "--config", "configs/quickstart.yaml", f"--data.init_args.root={synthetic_root}",
        "--data.init_args.videos_per_subject_class=1", f"--trainer.default_root_dir={tmp_path}",
        "--trainer.logger=false",
    ], run=False)
    assert sum(isinstance(c, ThroughputMonitor) for c in cli.trainer.callbacks) == 1


class _Recorder:
    """What the monitor sees of the LightningModule and the Trainer."""

    def __init__(self):
        self.device = torch.device("cpu")
        self.is_global_zero = True
        self.current_epoch = 2
        self.logged: dict[str, list[float]] = {}

    def log(self, name, value, **kwargs):
        self.logged.setdefault(name, []).append(value)

    def log_dict(self, values, **kwargs):
        for name, value in values.items():
            self.log(name, value)


def test_epoch_rate_and_wait_share_against_a_hand_count_with_a_mocked_clock(monkeypatch, caplog):
    """Clock (s): epoch starts at 10; batch 1 (4 clips) waits 10 -> 10.5, runs to 12.5; batch 2
    (2 clips) waits 12.5 -> 13.5, runs to 15. Epoch: 6 clips / 5 s = 1.2 clips/s, waiting
    1.5 of 5 s = 30%; per step: 4 / 2.5 s and 2 / 2.5 s (data wait included)."""
    ticks = iter([10.0, 10.5, 12.5, 13.5, 15.0])
    monkeypatch.setattr(throughput, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    monitor, seen = ThroughputMonitor(), _Recorder()
    monitor.on_train_epoch_start(seen, seen)
    for i, clips in enumerate((4, 2)):
        batch = {"video": torch.zeros(clips, 3, 1, 1, 1), "label": torch.zeros(clips)}
        monitor.on_train_batch_start(seen, seen, batch, i)
        monitor.on_train_batch_end(seen, seen, None, batch, i)
    with caplog.at_level(logging.INFO, logger="dna_video.throughput"):
        monitor.on_train_epoch_end(seen, seen)
    assert seen.logged["perf/train_clips_per_s"] == [pytest.approx(1.6), pytest.approx(0.8)]
    assert seen.logged["perf/epoch_train_clips_per_s"] == [pytest.approx(1.2)]
    assert seen.logged["perf/data_wait_fraction"] == [pytest.approx(0.3)]
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("epoch 2: 1.2 train clips/s, 30% of the time waiting for data, peak RSS ")
