"""Callbacks that make a training subprocess die at a chosen step, for the resume and
signal tests (given on the command line: --trainer.callbacks+=run_helpers.SignalAt)."""

import os
import signal

from lightning.pytorch.callbacks import Callback


class SignalAt(Callback):
    """Send this process ``signal_name`` right after optimiser step ``step``."""

    def __init__(self, step: int, signal_name: str = "SIGKILL") -> None:
        self.step = step
        self.signal_name = signal_name

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), getattr(signal, self.signal_name))
