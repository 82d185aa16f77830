"""The run's callbacks: clips/s (Lightning's ThroughputMonitor) and the data-wait share under a
mocked clock against a hand computation, peak memory and the epoch's log line, the prediction
file's rows against hand values, and all of them on by default in the CLI."""

import csv
import logging
import time

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader, Dataset

from dna_video.training.callbacks.failed_videos import FailedVideoMonitor
from dna_video.training.callbacks.predictions import PREDICTION_COLUMNS, PredictionWriter, write_predictions_csv
from dna_video.training.callbacks.throughput import DataWaitMonitor, videos_in_batch
from dna_video.training.cli import main
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.video import VideoClassifier

FETCH_S, STEP_S = 0.1, 0.4  # mocked seconds per batch fetched and per training step
BATCH_SIZES = [4, 4, 4, 2]  # 14 clips


class Clock:
    """A perf_counter that moves only when told."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class SlowBatches(Dataset):
    """Ready-made training batches; fetching each takes FETCH_S on the clock."""

    def __init__(self, clock):
        g = torch.Generator().manual_seed(0)
        self.clock = clock
        self.batches = [{"video": torch.randn(n, 3, 4, 32, 32, generator=g), "label": torch.randint(0, 3, (n,), generator=g)}
                        for n in BATCH_SIZES]

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        self.clock.now += FETCH_S
        return self.batches[i]


class MemoryLogger(Logger):
    """Keeps what Lightning's ThroughputMonitor logs (it writes to the loggers directly)."""

    def __init__(self):
        super().__init__()
        self.rows = []

    @property
    def name(self):
        return "memory"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        self.rows.append(dict(metrics))


def test_clips_per_second_and_data_wait_under_a_mocked_clock(monkeypatch, tmp_path, caplog):
    clock = Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    model = VideoClassifier(
        num_classes=3, num_frames=4, img_size=32, network=TimeSformerSpec(arch="tiny", embed_dim=32, depth=1, num_heads=2),
        lr_scheduler=None,
    )
    step = model.training_step

    def timed_step(batch, batch_idx):
        clock.now += STEP_S
        return step(batch, batch_idx)

    model.training_step = timed_step
    logger = MemoryLogger()
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", logger=logger, log_every_n_steps=1, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
        callbacks=[ThroughputMonitor(batch_size_fn=videos_in_batch, window_size=len(BATCH_SIZES)), DataWaitMonitor()],
    )
    with caplog.at_level(logging.INFO, logger="dna_video.training.callbacks.throughput"):
        trainer.fit(model, DataLoader(SlowBatches(clock), batch_size=None))

    # By hand. A loader of known length is read one batch at a time (no fetch ahead), so the
    # clock runs: fetch 0, step 0 | fetch 1, step 1 | fetch 2, step 2 | fetch 3, step 3 |.
    # Lightning's rate over its window of 4 step ends: the clips of steps 1-3 over the time
    # from the end of step 0 to the end of step 3.
    window_s = 3 * (FETCH_S + STEP_S)
    rates = [row["train/device/samples_per_sec"] for row in logger.rows if "train/device/samples_per_sec" in row]
    assert rates == [pytest.approx((4 + 4 + 2) / window_s)]
    assert [row["train/samples"] for row in logger.rows if "train/samples" in row] == [4, 8, 12, 14]
    # DataWaitMonitor: the whole epoch is 4 fetches + 4 steps; the fetches are the wait.
    epoch_s = 4 * FETCH_S + 4 * STEP_S
    metrics = trainer.callback_metrics
    assert metrics["perf/data_wait_fraction"].item() == pytest.approx(4 * FETCH_S / epoch_s)
    assert metrics["perf/epoch_train_clips_per_s"].item() == pytest.approx(sum(BATCH_SIZES) / epoch_s)
    assert metrics["perf/peak_memory_gb"] > 0.05  # a Python process with torch loaded
    lines = [r.getMessage() for r in caplog.records if "train clips/s" in r.getMessage()]
    assert lines == [f"epoch 0: {14 / epoch_s:.1f} train clips/s, 20% of the time waiting for data, peak RSS "
                     f"{metrics['perf/peak_memory_gb'].item():.2f} GB"]


def test_videos_in_batch_counts_videos_not_views():
    assert videos_in_batch({"video": torch.zeros(3, 6, 3, 2, 8, 8), "label": torch.zeros(3)}) == 3  # 3 videos x 6 views
    assert videos_in_batch({"video": torch.zeros(5, 3, 2, 8, 8)}) == 5
    assert videos_in_batch({"video": None, "failed": 2, "failed_paths": ["a", "b"]}) == 0


def test_prediction_rows_against_hand_values(tmp_path):
    probs = torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]])
    outputs = [
        {"path": ["a.mp4", "b.mp4"], "label": torch.tensor([1, 2]), "probs": probs, "pred": torch.tensor([1, 0])},
        None,  # a batch whose videos all failed
        {"path": ["c.mp4"], "label": None, "probs": torch.tensor([[0.2, 0.2, 0.6]]), "pred": torch.tensor([2])},
    ]
    path = tmp_path / "p.csv"
    assert write_predictions_csv(path, outputs, ["walk", "cook", "drink"], top_k=2) == 3
    with open(path) as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == PREDICTION_COLUMNS
    assert rows[1:] == [
        ["a.mp4", "1", "1", "cook", "0.600000", "1:0.6000 2:0.3000"],
        ["b.mp4", "2", "0", "walk", "0.500000", "0:0.5000 2:0.3000"],
        ["c.mp4", "", "2", "drink", "0.600000", "2:0.6000 0:0.2000"],
    ]


def test_cli_enables_them_by_default(synthetic_root, tmp_path):
    cli = main([
        "--config", "configs/quickstart.yaml", f"--data.init_args.root={synthetic_root}",
        "--data.init_args.videos_per_subject_class=1", f"--trainer.default_root_dir={tmp_path}",
        "--trainer.logger=false",
    ], run=False)
    callbacks = cli.trainer.callbacks
    for kind in (ThroughputMonitor, DataWaitMonitor, FailedVideoMonitor, PredictionWriter):
        assert sum(isinstance(c, kind) for c in callbacks) == 1, kind
    throughput = next(c for c in callbacks if isinstance(c, ThroughputMonitor))
    assert throughput.batch_size_fn is videos_in_batch
