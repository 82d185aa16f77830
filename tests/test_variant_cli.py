"""Attention per path through the CLI: from YAML and the command line; a variant trains."""

import pytest
import yaml
from test_cli import cli_args

from dna_video.models.attention import DenoisingAttention, SoftmaxAttention
from dna_video.models.attention import CogAttention, DifferentialAttention, SharedValueDnA
from dna_video.training.cli import main


@pytest.mark.slow
def test_attention_per_path_from_yaml_and_command_line(synthetic_root, tmp_path):
    config = tmp_path / "paths.yaml"
    config.write_text(yaml.safe_dump({"model": {"attention": "cog", "temporal_attention": "diff"}}))
    cli = main([*cli_args(synthetic_root, tmp_path), "--config", str(config)], run=False)
    blocks = cli.model.net.blocks
    assert all(isinstance(b.temporal_attn, DifferentialAttention) and isinstance(b.attn, CogAttention) for b in blocks)
    assert all(b.attn.keeps_softmax for b in blocks)  # 2 blocks: both are the first or the last
    cli = main([*cli_args(synthetic_root, tmp_path), "--config", str(config),
                "--model.network.attention_kwargs={cog_softmax_ends: false}"], run=False)
    assert not any(b.attn.keeps_softmax for b in cli.model.net.blocks)
    # The command line overrides the YAML, per path; one value sets both.
    cli = main([*cli_args(synthetic_root, tmp_path), "--config", str(config),
                "--model.network.spatial_attention=dna", "--model.network.temporal_attention=softmax"], run=False)
    assert all(isinstance(b.attn, DenoisingAttention) and type(b.temporal_attn) is SoftmaxAttention
               for b in cli.model.net.blocks)
    cli = main([*cli_args(synthetic_root, tmp_path), "--model.network.attention=dna_shared_v"], run=False)
    assert all(isinstance(b.attn, SharedValueDnA) and isinstance(b.temporal_attn, SharedValueDnA)
               for b in cli.model.net.blocks)


@pytest.mark.slow
def test_fit_with_a_variant_per_path_saves_and_restores_it(synthetic_root, tmp_path):
    cli = main(["fit", *cli_args(synthetic_root, tmp_path, "--model.network.temporal_attention=softmax",
                                 "--model.network.spatial_attention=diff", "--trainer.max_epochs=1",
                                 "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1")])
    assert cli.trainer.current_epoch == 1
    run = tmp_path / "smoke" / "version_0"
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["network"]
    assert saved["temporal_attention"] == "softmax" and saved["spatial_attention"] == "diff"
    from dna_video.tasks.video import VideoClassifier

    restored = VideoClassifier.load_from_checkpoint(run / "checkpoints" / "last.ckpt")
    assert isinstance(restored.net.blocks[0].attn, DifferentialAttention)
    assert type(restored.net.blocks[0].temporal_attn) is SoftmaxAttention
