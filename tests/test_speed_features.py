"""Speed options users switch on from the command line: bf16 autocast and torch.compile."""

import math
import shutil

import pytest
import torch

from dna_video.training.cli import main
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.video import VideoClassifier
from test_cli import cli_args


@pytest.mark.slow
def test_bf16_mixed_precision_trains_from_the_cli(synthetic_root, tmp_path):
    cli = main(["fit", *cli_args(synthetic_root, tmp_path, "--trainer.precision=bf16-mixed",
                                 "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
                                 "--trainer.limit_val_batches=1", "--trainer.limit_test_batches=1",
                                 "--trainer.log_every_n_steps=1",
                                 # No weight decay: alpha moves only if it receives a gradient.
                                 "--model.optimizer.init_args.weight_decay=0")])
    assert cli.trainer.precision == "bf16-mixed"
    # Parameters stay float32 (autocast computes in bf16). alpha starts at exactly 0.5 in
    # every head and, without weight decay, two Adam steps moved it in both attentions of every block, so the
    # hand-written DnA backward delivered its gradient under autocast.
    assert all(p.dtype == torch.float32 for p in cli.model.parameters())
    for block in cli.model.net.blocks:
        for attn in (block.attn, block.temporal_attn):
            assert torch.isfinite(attn.neg_scalers).all() and (attn.neg_scalers != 0.5).all()
    metrics = cli.trainer.logged_metrics
    assert set(metrics) >= {"test/loss", "test/top1"} and math.isfinite(float(metrics["test/loss"]))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="torch.compile's CPU backend needs a C compiler")
def test_compile_keeps_parameter_names_and_outputs(monkeypatch):
    # The cheap aot_eager backend: the spec's in-place compile is what is tested here; inductor
    # against eager is measured in `python -m benchmarks --sections compile`.
    real = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: real(self, **{"backend": "aot_eager", **kw}))
    torch.manual_seed(0)
    kwargs = dict(num_classes=5, num_frames=4, img_size=32)
    # One block: what is checked (names, outputs) does not depend on depth; tracing time does.
    compiled = VideoClassifier(network=TimeSformerSpec(arch="tiny", depth=1, compile=True), **kwargs)
    eager = VideoClassifier(network=TimeSformerSpec(arch="tiny", depth=1), **kwargs)
    # Checkpoints of a compiled run load into an eager model and back: same keys.
    assert list(compiled.state_dict()) == list(eager.state_dict())
    eager.load_state_dict(compiled.state_dict())
    video = torch.randn(2, 3, 4, 32, 32)
    compiled.eval(), eager.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled.net(video), eager.net(video), atol=1e-5, rtol=1e-5)
