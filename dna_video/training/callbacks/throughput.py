"""How fast training runs and what holds it back: clips/s, data wait, peak memory.

Two callbacks, both on by default in the CLI:

* Lightning's own :class:`~lightning.pytorch.callbacks.ThroughputMonitor`, counting videos
  with ``batch_size_fn=``:func:`videos_in_batch`, logs ``train/device/samples_per_sec`` (clips/s, a rolling
  mean over the last ``window_size`` steps; also ``validate/...`` and ``test/...``).
* :class:`DataWaitMonitor` logs, per training epoch, ``perf/data_wait_fraction`` (the share
  of the epoch spent waiting for the next batch), ``perf/peak_memory_gb`` and the whole
  epoch's rate ``perf/epoch_train_clips_per_s`` (what ``summary.json`` keeps), and prints one
  line:

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

__all__ = ["DataWaitMonitor", "peak_memory_gb", "videos_in_batch"]


def videos_in_batch(batch: Any) -> int:
    """Samples in a batch: videos of :func:`~dna_video.data.dataset.collate_videos` (one clip
    each in training, all views of each in evaluation; 0 when every video of it failed to
    decode), or images of an ``(images, targets)`` batch."""
    samples = batch.get("video") if isinstance(batch, dict) else batch
    if isinstance(samples, (tuple, list)) and samples:
        samples = samples[0]
    return int(samples.shape[0]) if isinstance(samples, torch.Tensor) else 0


def peak_memory_gb(device: torch.device) -> tuple[float, str]:
    """(peak memory in GB, what it is) for ``device``."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9, "peak GPU memory"
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if sys.platform == "darwin" else 1024) / 1e9, "peak RSS"


class DataWaitMonitor(L.Callback):
    """Per training epoch: the share of time spent waiting for batches, peak memory and the
    epoch's clips/s, logged and in one console line (see the module docstring)."""

    def __init__(self) -> None:
        self._clips = 0
        self._epoch_start = self._step_end = 0.0
        self._wait = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._clips, self._wait = 0, 0.0
        self._epoch_start = self._step_end = time.perf_counter()
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        # From the end of the previous step (or the epoch's start) to here: the loader's time.
        self._wait += time.perf_counter() - self._step_end

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._clips += videos_in_batch(batch)
        self._step_end = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Up to the end of the last training step: validation, which Lightning runs before
        # this hook, does not count.
        elapsed = self._step_end - self._epoch_start
        if not self._clips or elapsed <= 0:
            return
        rate, wait = self._clips / elapsed, self._wait / elapsed
        memory, what = peak_memory_gb(pl_module.device)
        pl_module.log_dict(
            {"perf/epoch_train_clips_per_s": rate, "perf/data_wait_fraction": wait, "perf/peak_memory_gb": memory},
            on_step=False, on_epoch=True,
        )
        if trainer.is_global_zero:
            log.info(
                "epoch %d: %.1f train clips/s, %.0f%% of the time waiting for data, %s %.2f GB",
                trainer.current_epoch, rate, 100 * wait, what, memory,
            )
