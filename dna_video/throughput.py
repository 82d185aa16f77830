"""Training throughput and memory in the log: clips/s, time spent waiting for data, peak memory.

Per training step the logger gets ``perf/train_clips_per_s`` (that step, data wait included);
after every training epoch it gets the epoch's figures, and one line goes to the console:

    epoch 3: 212.4 train clips/s, 31% of the time waiting for data, peak RSS 1.84 GB

A high data-wait share means the loader (decoding, workers) is the bottleneck, not the model.
Peak memory is the accelerator's allocator peak on CUDA (reset each epoch) and the process's
peak resident set size on CPU (a high-water mark since start).
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from typing import Any

import lightning as L
import torch

log = logging.getLogger(__name__)

__all__ = ["ThroughputMonitor", "peak_memory_gb"]


def peak_memory_gb(device: torch.device) -> tuple[float, str]:
    """(peak memory in GB, what it is) for ``device``."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9, "peak GPU memory"
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if sys.platform == "darwin" else 1024) / 1e9, "peak RSS"


def _batch_size(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = batch.get("video", next(iter(batch.values())))
    elif isinstance(batch, (list, tuple)):
        batch = batch[0]
    return int(batch.shape[0]) if isinstance(batch, torch.Tensor) else 0


class ThroughputMonitor(L.Callback):
    """Log training clips/s, the share of time spent waiting for the next batch, and peak
    memory (see the module docstring). Enabled by default in the CLI."""

    def __init__(self) -> None:
        self._clips = 0
        self._epoch_start = self._step_end = self._step_start = 0.0
        self._wait = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._clips, self._wait = 0, 0.0
        self._epoch_start = self._step_end = time.perf_counter()
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._step_start = time.perf_counter()
        self._wait += self._step_start - self._step_end

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        n = _batch_size(batch)
        self._clips += n
        if now > self._step_end:
            pl_module.log("perf/train_clips_per_s", n / (now - self._step_end), on_step=True, on_epoch=False)
        self._step_end = now

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Up to the end of the last training step: validation, which Lightning runs before
        # this hook, does not count.
        elapsed = self._step_end - self._epoch_start
        if not self._clips or elapsed <= 0:
            return
        rate, wait = self._clips / elapsed, self._wait / elapsed
        memory, what = peak_memory_gb(pl_module.device)
        pl_module.log_dict(
            {
                "perf/epoch_train_clips_per_s": rate,
                "perf/data_wait_fraction": wait,
                "perf/peak_memory_gb": memory,
            },
            on_step=False, on_epoch=True,
        )
        if trainer.is_global_zero:
            log.info(
                "epoch %d: %.1f train clips/s, %.0f%% of the time waiting for data, %s %.2f GB",
                trainer.current_epoch, rate, 100 * wait, what, memory,
            )
