"""Shared by the run tests: the command-line options of a tiny quickstart run, a callback
that makes a training process die at a chosen step (given on the command line:
--trainer.callbacks+=run_helpers.SignalAt), and ``python cli.py`` in a forked process."""

import multiprocessing
import os
import signal
import sys
from multiprocessing.process import BaseProcess
from pathlib import Path

from lightning.pytorch.callbacks import Callback


class SignalAt(Callback):
    """Send this process ``signal_name`` right after optimiser step ``step``."""

    def __init__(self, step: int, signal_name: str = "SIGKILL") -> None:
        self.step = step
        self.signal_name = signal_name

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), getattr(signal, self.signal_name))


def short_run_args(root, log_dir, *extra):
    """:func:`tiny_run_args` of experiment ``exp`` with 1 validation crop and batch, no warm-up,
    no sanity check and no test after fit."""
    return tiny_run_args(
        root, log_dir,
        "--data.init_args.val_num_crops=1",
        "--model.schedule.warmup_steps=0",
        "--trainer.logger.init_args.name=exp",
        "--trainer.num_sanity_val_steps=0",
        "--trainer.limit_val_batches=1",
        "--test_after_fit=false",
        *extra,
    )


def tiny_run_args(root, log_dir, *extra):
    """Options of a quickstart run small enough for a test: 1 video per (subject, class), a
    1-block 16-wide model, 1 test view, a CSV logger under ``log_dir``."""
    return [
        "--config", "configs/quickstart.yaml",
        f"--data.init_args.root={root}",
        "--data.init_args.videos_per_subject_class=1",
        "--data.init_args.num_workers=0",
        "--data.init_args.batch_size=4",
        "--data.init_args.num_frames=4",
        "--data.init_args.test_num_crops=1",
        "--model.network.embed_dim=16", "--model.network.num_heads=2", "--model.network.depth=1",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={log_dir}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        *extra,
    ]


def forked_cli(args: list[str], output: Path) -> BaseProcess:
    """``python cli.py ARGS`` (``cli.console_main``) in a forked copy of this process: a
    process of its own (its signals, exit status and files), without the seconds of CPU a new
    interpreter spends importing torch and Lightning. Its standard output and error go to the
    file ``output``. Started, not waited for: ``join()``, then ``exitcode`` (-N: killed by
    signal N; 1: an exception, its traceback in ``output``). Tests take it as the ``forked_cli``
    fixture (conftest), which checks that they are marked ``forks`` and so run first."""
    process = multiprocessing.get_context("fork").Process(target=_console_main_into, args=(list(args), str(output)))
    process.start()
    return process


def fork_can_use_autograd() -> bool:
    """Whether a child forked from this process can run a backward pass: not once this process
    has run a compiled backward (torch starts autograd threads a forked child cannot have)."""
    pid = os.fork()
    if pid == 0:  # the child: a tiny backward, then out without any cleanup of the parent's state
        code = 1
        try:
            import torch

            torch.ones(1, requires_grad=True).sum().backward()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _console_main_into(args: list[str], output: str) -> None:
    from dna_video.training.cli import console_main

    stream = open(output, "w", buffering=1)
    for fd in (1, 2):  # C-level output too
        os.dup2(stream.fileno(), fd)
    sys.stdout = sys.stderr = stream
    console_main(args)
