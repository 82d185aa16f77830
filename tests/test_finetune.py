"""Fine-tuning: VideoClassifier.init_from (our Lightning checkpoints here; every layout is in
test_checkpoints.py), frozen backbone, backbone LR multiplier, and a CLI fine-tuning run on
generated videos from a checkpoint with another class count and frame count."""

import shutil

import lightning as L
import pytest
import torch
from test_cli import cli_args

from dna_video.data.synthetic import SYNTHETIC_CLASSES
from torch.utils.data import DataLoader

from dna_video.training.cli import main
from dna_video.checkpoints import PretrainedWeights
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.video import VideoClassifier

TINY_NET = dict(arch="tiny", embed_dim=32, num_heads=2, depth=2, drop_path_rate=0.0, head_dropout=0.0)
TINY = dict(network=TimeSformerSpec(**TINY_NET))


@pytest.fixture(scope="session")
def source_ckpt(tmp_path_factory):
    """A real Lightning checkpoint of a 10-class, 8-frame DnA model after one training step."""
    torch.manual_seed(0)
    model = VideoClassifier(num_classes=10, num_frames=8, img_size=64, **TINY)
    data = [{"video": torch.randn(3, 8, 64, 64), "label": i % 10} for i in range(4)]
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=2))
    path = tmp_path_factory.mktemp("source") / "source-10cls-8f.ckpt"
    trainer.save_checkpoint(path)
    return path, {k: v.clone() for k, v in model.net.state_dict().items()}


def test_init_from_our_checkpoint_adapts_class_and_frame_count(source_ckpt):
    path, source = source_ckpt
    torch.manual_seed(0)  # the fresh head's 5-std bound below: timm's trunc_normal_ cuts at +/-2, not 2 std
    restored = VideoClassifier.load_from_checkpoint(path)
    assert all(torch.equal(v, source[k]) for k, v in restored.net.state_dict().items())

    model = VideoClassifier(num_classes=6, num_frames=4, img_size=64, init=PretrainedWeights(source=str(path)), **TINY)
    report = model.init_report
    assert report.container.startswith("Lightning checkpoint") and "prefix 'net.' removed" in report.notes
    assert set(report.unused) == {"head.weight", "head.bias"}
    assert report.initialised == {"head.weight": "re-initialised (classes differ: 10 in the checkpoint, 6 here)",
                                  "head.bias": "re-initialised (classes differ: 10 in the checkpoint, 6 here)"}
    assert report.resampled == {"time_embed": "8 -> 4 frames (linear)"}
    # The head's values, not only the report: fresh (timm's trunc_normal(0.02), zero bias),
    # no row of it the checkpoint's (whose bias one training step made non-zero).
    head, old_head = model.net.head.weight.detach(), source["head.weight"]
    assert (head[:, None] - old_head[None]).abs().amax(-1).min() > 1e-3
    assert torch.count_nonzero(model.net.head.bias) == 0 and torch.count_nonzero(source["head.bias"]) > 0
    assert 0.01 < head.std().item() < 0.03 and head.abs().max() < 0.1
    state = model.net.state_dict()
    for key in ["blocks.1.attn.q_neg.weight", "blocks.0.temporal_attn.neg_scalers", "pos_embed", "norm.bias"]:
        assert torch.equal(state[key], source[key]), key
    assert model.net.head.weight.shape == (6, 32) and model.net.time_embed.shape == (1, 4, 32)


def test_freeze_backbone_trains_only_the_head_in_eval_mode():
    model = VideoClassifier(num_classes=6, num_frames=4, img_size=32, freeze_backbone=True,
                            network=TimeSformerSpec(**{**TINY_NET, "drop_path_rate": 0.5, "head_dropout": 0.5}))
    groups = model.configure_optimizers()["optimizer"].param_groups
    assert [g["name"] for g in groups] == ["head"]
    assert {id(p) for p in groups[0]["params"]} == {id(model.net.head.weight), id(model.net.head.bias)}
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    # Modes as seen inside training_step of a real fit, with validation in between.
    modes = []
    step = model.training_step

    def recording_step(batch, *args):
        blocks_training = any(m.training for m in model.net.blocks.modules())
        modes.append((model.net.head.training, model.net.head_drop.training, model.net.training, blocks_training))
        return step(batch, *args)

    model.training_step = recording_step
    clips = [{"video": torch.randn(2, 3, 4, 32, 32), "label": torch.tensor([0, 1])} for _ in range(2)]
    views = [{"video": torch.randn(2, 1, 3, 4, 32, 32), "label": torch.tensor([0, 1])}]
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, DataLoader(clips, batch_size=None), DataLoader(views, batch_size=None))
    assert modes == [(True, True, False, False)] * 4  # head trains, backbone (drop-path) in eval
    changed = {k for k, v in model.net.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"head.weight", "head.bias"}


def test_backbone_lr_multiplier_survives_the_schedule():
    model = VideoClassifier(num_classes=6, num_frames=4, img_size=32, backbone_lr_mult=0.1, **TINY)
    config = model.configure_optimizers()  # the paper's SGD lr 0.005, x0.1 at epochs 11 and 14
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert [(g["name"], g["lr"]) for g in optimizer.param_groups] == [("backbone", pytest.approx(0.0005)), ("head", 0.005)]
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    for _ in range(11):
        optimizer.step()
        scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == [pytest.approx(0.00005), pytest.approx(0.0005)]
    with pytest.raises(ValueError, match="backbone_lr_mult"):
        VideoClassifier(num_classes=6, backbone_lr_mult=-1.0, **TINY)


@pytest.mark.slow
def test_cli_fine_tunes_from_a_checkpoint_with_other_classes_and_frames(synthetic_root, tmp_path, source_ckpt, caplog):
    source_path, source = source_ckpt
    path = tmp_path / "pretrained.ckpt"
    shutil.copy(source_path, path)
    caplog.set_level("INFO", logger="dna_video")
    cli = main(["fit", *cli_args(synthetic_root, tmp_path, f"--model.init.source={path}", "--model.freeze_backbone=true",
                                 "--model.label_smoothing=0.1", "--trainer.max_epochs=1",
                                 "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
                                 "--trainer.limit_test_batches=2", "--trainer.log_every_n_steps=1")])
    # The data module's 5 classes and 4 frames reached the model; the 10-class, 8-frame
    # checkpoint was adapted to them and the report was logged.
    net = cli.model.net
    assert net.num_classes == len(SYNTHETIC_CLASSES) and net.num_frames == 4
    assert "Checkpoint import: " + str(path) in caplog.text
    assert "time_embed: 8 -> 4 frames (linear)" in caplog.text
    # Linear probe: after training, the backbone is still exactly the checkpoint's.
    state = net.state_dict()
    for key, value in source.items():
        if not key.startswith("head.") and key != "time_embed":
            assert torch.equal(state[key], value), key
    run = tmp_path / "smoke" / "version_0"
    rows = (run / "metrics.csv").read_text()
    assert "test/top1" in rows and "train/loss" in rows

    # The fine-tuned checkpoint restores without the pretrained file, in Python and in the CLI
    # (--ckpt_path re-applies the saved hyper-parameters, where init_from is cleared).
    last = run / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    assert saved["hyper_parameters"]["init"]["source"] is None and saved["initialised_from"] == str(path)
    path.unlink()
    restored = VideoClassifier.load_from_checkpoint(last)
    assert all(torch.equal(v, state[k]) for k, v in restored.net.state_dict().items())
    main(["validate", *cli_args(synthetic_root, tmp_path, f"--model.init.source={path}", f"--ckpt_path={last}",
                                "--trainer.limit_val_batches=1")])


@pytest.mark.parametrize("interval, steps_per_epoch, epochs", [("step", 3, 2), ("epoch", 3, 2)])
def test_the_schedule_steps_at_its_interval(interval, steps_per_epoch, epochs):
    """StepLR(step_size=1, gamma=0.5) halves the learning rate once per optimiser step or once per
    epoch, as model.schedule.interval says: after 2 epochs of 3 steps, lr0 / 2^6 or lr0 / 2^2."""
    import lightning as L

    from dna_video.tasks.video import Schedule

    model = VideoClassifier(
        num_classes=2, num_frames=2, img_size=16, network=TimeSformerSpec(arch="tiny", embed_dim=16, depth=1, num_heads=2),
        optimizer={"class_path": "torch.optim.SGD", "init_args": {"lr": 0.8}},
        lr_scheduler={"class_path": "torch.optim.lr_scheduler.StepLR", "init_args": {"step_size": 1, "gamma": 0.5}},
        schedule=Schedule(interval=interval),
    )
    g = torch.Generator().manual_seed(0)
    batches = [{"video": torch.randn(2, 3, 2, 16, 16, generator=g), "label": torch.tensor([0, 1])}
               for _ in range(steps_per_epoch)]
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", limit_val_batches=0)
    trainer.fit(model, torch.utils.data.DataLoader(batches, batch_size=None))
    halvings = steps_per_epoch * epochs if interval == "step" else epochs
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.8 / 2 ** halvings)
