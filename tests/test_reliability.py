"""A run protects the user's work: divergence stops, resume resumes, errors at the right place.

A process that must die runs on its own: SIGTERM as a real subprocess of ``python cli.py``,
SIGKILL in a forked copy of the test process (the ``forked_cli`` fixture: no second start-up
of torch and Lightning; marked ``forks``, so it runs before any compile test, see conftest).
The rest runs in-process (``cli.console_main``, what ``python cli.py`` runs: its exit status
and stderr), the runs a killed one is compared with included.
"""

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from dna_video.training.callbacks.guard import NonFiniteError, NonFiniteGuard
from run_helpers import short_run_args
from dna_video.runs.registry import Experiment, RestoreError, find_latest_run, record_run
from dna_video.training.runs import AtomicCheckpointIO, compare_hparams

REPO = Path(__file__).resolve().parents[1]


# -- non-finite guard ---------------------------------------------------------------------


class Toy(L.LightningModule):
    """A linear model whose loss is NaN at batch ``nan_at`` and whose gradient is infinite
    (finite loss) at batch ``inf_grad_at``."""

    def __init__(self, nan_at=-1, inf_grad_at=-1):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 1)
        self.nan_at, self.inf_grad_at = nan_at, inf_grad_at

    def training_step(self, batch, batch_idx):
        loss = (self.lin(batch["x"]).squeeze(-1) - batch["y"]).pow(2).mean()
        if batch_idx == self.nan_at:
            loss = loss * float("nan")
        if batch_idx == self.inf_grad_at:
            w = self.lin.weight.sum()
            loss = loss + (w - w.detach()).sqrt()  # value 0, gradient 1 / (2 sqrt(0)) = inf
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def toy_batches():
    g = torch.Generator().manual_seed(1)
    return [{"x": torch.randn(2, 3, generator=g), "y": torch.randn(2, generator=g),
             "path": [f"/videos/clip_{i}_{j}.mp4" for j in range(2)]} for i in range(4)]


def toy_fit(model, guard):
    trainer = L.Trainer(max_epochs=1, callbacks=[guard], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    batches = toy_batches()
    trainer.fit(model, DataLoader(batches, batch_size=None))
    return trainer


@pytest.mark.parametrize("bad", ["nan_at", "inf_grad_at"])
def test_guard_stops_before_the_step_naming_epoch_step_and_videos(bad):
    model = Toy(**{bad: 2})
    with pytest.raises(NonFiniteError) as info:
        toy_fit(model, NonFiniteGuard())
    text = str(info.value)
    assert "epoch 0, step 2 (batch 2)" in text and "/videos/clip_2_0.mp4, /videos/clip_2_1.mp4" in text
    assert ("loss nan" if bad == "nan_at" else "gradient norm inf") in text
    assert all(torch.isfinite(p).all() for p in model.parameters())


class InfLoss(Toy):
    """A finite gradient (the loss's infinite part is a constant) with an infinite loss value."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        return loss + float("inf") if batch_idx == 1 else loss


def test_guard_stops_on_an_infinite_loss_with_the_gradient_check_off():
    # Only the loss check can see it: the gradient of a constant is 0.
    model = InfLoss()
    with pytest.raises(NonFiniteError, match=r"loss inf at epoch 0, step 1 \(batch 1\)"):
        toy_fit(model, NonFiniteGuard(check_grad_norm=False))
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_guard_stops_on_a_non_finite_validation_loss(value):
    class Validated(Toy):
        def validation_step(self, batch, batch_idx):
            self.log("val/loss", torch.tensor(value))

    trainer = L.Trainer(max_epochs=2, callbacks=[NonFiniteGuard()], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                        num_sanity_val_steps=0)
    batches = toy_batches()
    with pytest.raises(NonFiniteError, match=f"validation loss is {value} after epoch 0"):
        trainer.fit(Validated(), DataLoader(batches, batch_size=None), DataLoader(batches[:1], batch_size=None))
    assert trainer.current_epoch == 0  # stopped at the first validation, not after the run


def test_guard_skips_allowed_bad_batches_without_touching_the_weights():
    model = toy_fit_model = Toy(nan_at=1)
    guard = NonFiniteGuard(max_skipped_batches=1)
    trainer = toy_fit(toy_fit_model, guard)
    assert len(guard.skipped) == 1 and "step 1" in guard.skipped[0]
    # Independently: plain SGD over the batches without the skipped one.
    reference = Toy()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for i, batch in enumerate(toy_batches()):
        if i == 1:
            continue
        opt.zero_grad()
        (reference.lin(batch["x"]).squeeze(-1) - batch["y"]).pow(2).mean().backward()
        opt.step()
    for ours, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, ref, rtol=0, atol=0)
    assert trainer.global_step == 4  # the skipped batch still counts as a step (schedule unchanged)


def test_guard_refuses_to_write_a_checkpoint_with_non_finite_weights(tmp_path):
    model = Toy()
    trainer = toy_fit(model, NonFiniteGuard())
    with torch.no_grad():
        model.lin.bias.fill_(float("inf"))
    with pytest.raises(NonFiniteError, match="lin.bias"):
        trainer.save_checkpoint(tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()


# -- run registry, checkpoint files, options against a checkpoint ------------------------------


def test_atomic_checkpoint_write_keeps_the_old_file_when_the_save_dies(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "epoch": 1}, path)

    def dies_half_way(obj, f):
        with open(f, "wb") as out:  # a path: the temporary file beside the checkpoint
            out.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt  # what a kill looks like from inside

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "epoch": 2}, path)
    monkeypatch.undo()
    assert torch.load(path)["epoch"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_latest_run_is_found_by_identity_not_folder_number(tmp_path):
    experiment = Experiment("CSVLogger", str(tmp_path), "exp")
    older = tmp_path / "exp" / "version_7" / "checkpoints"
    newer = tmp_path / "exp" / "version_2" / "checkpoints"
    without = tmp_path / "exp" / "version_9" / "checkpoints"
    for folder in (older, newer, without):
        folder.mkdir(parents=True)
    (older / "last.ckpt").write_bytes(b"x")
    (newer / "last.ckpt").write_bytes(b"x")
    record_run(experiment, 7, str(older.parent), str(older))
    record_run(Experiment("CSVLogger", str(tmp_path), "other"), 3, "", str(newer))  # another experiment
    record_run(experiment, 2, str(newer.parent), str(newer))
    record_run(experiment, 9, str(without.parent), str(without))  # started, killed before a checkpoint
    assert find_latest_run(experiment).version == "2"
    with pytest.raises(RestoreError, match="no recorded run of experiment 'nothing'"):
        find_latest_run(Experiment("CSVLogger", str(tmp_path), "nothing"))


def test_options_against_a_checkpoint():
    network = {"arch": "tiny", "attention": "dna", "depth": 2, "attention_kwargs": None}
    saved = {"network": network, "num_frames": 4, "evaluation": {"view_aggregation": "sum"}, "init": {"source": None}}
    # An import already in the weights, an empty dict for none.
    same = dict(saved, init={"source": "vit.pth"}, network=dict(network, attention_kwargs={}))
    assert compare_hparams(same, saved, "run.ckpt") == []
    warnings = compare_hparams(dict(saved, evaluation={"view_aggregation": "max"}), saved, "run.ckpt")
    assert len(warnings) == 1 and "model.evaluation.view_aggregation: given 'max', the checkpoint has 'sum'" in warnings[0]
    with pytest.raises(RestoreError) as info:
        compare_hparams(dict(saved, network=dict(network, attention="softmax", depth=4)), saved, "run.ckpt")
    assert "model.network.attention: given 'softmax'" in str(info.value) and "model.network.depth" in str(info.value)


def test_empty_split_stops_at_setup_naming_split_root_and_protocol(tmp_path):
    from dna_video.data import ToyotaSmarthome

    root = tmp_path / "ntu_by_mistake"
    root.mkdir()
    (root / "S001C001P001R001A001_rgb.avi").write_bytes(b"")  # another dataset's name layout
    dm = ToyotaSmarthome(root=str(root), protocol="cs")
    with pytest.raises(ValueError) as info:
        dm.setup("fit")
    text = str(info.value)
    assert "train: the split is empty" in text and str(root) in text and "cs" in text
    assert "no video of this dataset found there" in text and "data.init_args.root" in text


# -- the command line, as a user runs it ------------------------------------------------------


def cli(*args, **kwargs):
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'tests'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "cli.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600, **kwargs)


tiny_args = short_run_args


def finite_checkpoint(path):
    state = torch.load(path, map_location="cpu", weights_only=True)
    return all(torch.isfinite(t).all() for t in state["state_dict"].values() if t.is_floating_point()), state


@pytest.mark.slow
def test_divergence_stops_the_process_and_keeps_the_last_good_checkpoint(synthetic_root, tmp_path, capsys):
    # A sane epoch 0, then the schedule multiplies the learning rate by 1e12: SGD diverges.
    code, stderr = console(capsys, "fit", *tiny_args(
        synthetic_root, tmp_path, "--trainer.max_epochs=3", "--trainer.limit_train_batches=3",
        "--model.optimizer=torch.optim.SGD", "--model.optimizer.init_args.lr=0.01",
        "--model.lr_scheduler=torch.optim.lr_scheduler.MultiStepLR", "--model.lr_scheduler.init_args.milestones=[1]",
        "--model.lr_scheduler.init_args.gamma=1e12"))
    assert code == 1, stderr[-3000:]
    assert "error: NonFiniteError: training diverged" in stderr and "Traceback" not in stderr
    message = stderr[stderr.index("training diverged"):]
    assert "at epoch 1, step " in message and ".mp4" in message
    checkpoints = tmp_path / "exp" / "version_0" / "checkpoints"
    ok, last = finite_checkpoint(checkpoints / "last.ckpt")
    assert ok and last["epoch"] == 0 and last["global_step"] == 3
    assert f"the last good checkpoint is {checkpoints / 'last.ckpt'}" in message
    for path in checkpoints.glob("*.ckpt"):  # best too: only finite weights were ever written
        assert finite_checkpoint(path)[0]


@pytest.mark.slow
@pytest.mark.forks
def test_sigkill_mid_epoch_then_ckpt_path_last_reaches_the_uninterrupted_result(synthetic_root, tmp_path, capsys,
                                                                                caplog, restore_determinism,
                                                                                forked_cli):
    args = ["--trainer.max_epochs=3", "--trainer.limit_train_batches=3", "--trainer.deterministic=true",
            "--trainer.logger.init_args.flush_logs_every_n_steps=1"]  # epoch 0's rows on disk before the kill
    logs = tmp_path / "killed"
    # The killed run in a process of its own, forked (step 4 is the second batch of epoch 1:
    # last.ckpt holds epoch 0), meanwhile the uninterrupted one in this process; the resumed run
    # here too. The same thread count in both processes, the same kernels: the same bits.
    killed = forked_cli(["fit", *tiny_args(synthetic_root, logs, *args, "--trainer.callbacks+=run_helpers.SignalAt",
                                           "--trainer.callbacks.init_args.step=4")], tmp_path / "killed_output.txt")
    code, stderr = console(capsys, "fit", *tiny_args(synthetic_root, tmp_path / "straight", *args))
    assert code in (0, None), stderr[-3000:]
    killed.join(timeout=600)
    assert killed.exitcode == -signal.SIGKILL, (tmp_path / "killed_output.txt").read_text()[-3000:]
    assert torch.load(logs / "exp" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    (logs / "exp" / "version_1").mkdir()  # a newer folder number of another kind: not the run
    with caplog.at_level(logging.INFO, logger="dna_video"):
        code, stderr = console(capsys, "fit", *tiny_args(synthetic_root, logs, *args, "--ckpt_path", "last"))
    assert code in (0, None), stderr[-3000:]
    assert "continuing" in caplog.text

    run = logs / "exp" / "version_0"
    final = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    reference = torch.load(tmp_path / "straight" / "exp" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["epoch"] == reference["epoch"] == 2 and final["global_step"] == reference["global_step"] == 9
    # Same seed, deterministic CPU kernels, the data order and augmentation restored with the
    # RNG state: the same sums in the same order, so bit-identical weights (tolerance 0).
    for key, value in reference["state_dict"].items():
        torch.testing.assert_close(final["state_dict"][key], value, rtol=0, atol=0, msg=key)
    # Best-checkpoint tracking continued: the same best as the uninterrupted run.
    ours = next(v for k, v in final["callbacks"].items() if "val/top1" in k)
    theirs = next(v for k, v in reference["callbacks"].items() if "val/top1" in k)
    assert ours["best_model_score"] == theirs["best_model_score"]
    assert Path(ours["best_model_path"]).parent == run / "checkpoints"
    # The resumed epochs were logged into the run's own folder, after the rows written before
    # the kill; the learning rate is logged.
    import csv
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["epoch"]) for r in rows if r.get("val/top1")) == [0, 1, 2]
    assert any(k.startswith("lr-") and v for r in rows for k, v in r.items())
    assert not any((logs / "exp" / "version_1").iterdir())


@pytest.mark.slow
def test_sigterm_saves_a_resumable_checkpoint_and_exits_cleanly(synthetic_root, tmp_path):
    result = cli("fit", *tiny_args(synthetic_root, tmp_path, "--trainer.max_epochs=3", "--trainer.limit_train_batches=3",
                                   "--trainer.callbacks+=run_helpers.SignalAt", "--trainer.callbacks.init_args.step=4",
                                   "--trainer.callbacks.init_args.signal_name=SIGTERM"))
    assert result.returncode == 0, result.stderr[-3000:]
    last = torch.load(tmp_path / "exp" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 4 and last["epoch"] == 1
    assert "SIGTERM at epoch 1, step 4" in result.stderr


def console(capsys, *args):
    """``python cli.py ARGS`` in this process: (exit status, stderr); status None for a run that
    returned without ``sys.exit``."""
    from dna_video.training.cli import console_main

    capsys.readouterr()
    try:
        console_main(list(args))
        code = None
    except SystemExit as exit_info:
        code = exit_info.code
    return code, capsys.readouterr().err


@pytest.fixture
def restore_determinism():
    """``--trainer.deterministic=true`` in this process switches torch's deterministic
    algorithms on for good: back as they were after the test."""
    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.slow
def test_user_errors_name_the_file_without_a_traceback_and_open_no_run(synthetic_root, tmp_path, capsys):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a checkpoint")
    code, stderr = console(capsys, "validate", *tiny_args(synthetic_root, tmp_path / "logs", f"--ckpt_path={text_file}"))
    assert code == 1 and "Traceback" not in stderr
    assert f"error: RestoreError: {text_file} is not a torch checkpoint" in stderr
    assert not (tmp_path / "logs").exists()  # no empty version folder
    code, stderr = console(capsys, "fit", *tiny_args(synthetic_root, tmp_path / "logs", "--ckpt_path=last"))
    assert code == 1 and "no recorded run of experiment 'exp'" in stderr
