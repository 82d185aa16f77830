"""The throughput monitor: clips counted by hand, metrics and the log line, on by default in the CLI."""

import logging

import lightning as L
import torch
from torch.utils.data import DataLoader

from dna_video.cli import main
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
