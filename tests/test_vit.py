"""DnA in image classification: timm's VisionTransformer with our attention (registered timm
names, equal to timm's own ViT with softmax attention), image checkpoints (timm ViT, fused
DnA-ViT against the written-out image model), and fit + test through the image CLI on a
generated image folder."""

import csv

import pytest
import timm
import torch
from test_checkpoints import TOL, dna_vit_logits, random_dna_vit_state, save

from dna_video.models.attention import DenoisingAttention
from dna_video.models.attention import CogAttention, DifferentialAttention, diff_lambda_init
from dna_video.data.images import SYNTHETIC_SHAPES
from dna_video.checkpoints import load_image_checkpoint
from dna_video.models.vit import vision_transformer

TINY = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2, mlp_ratio=2.0, num_classes=5)


def test_registered_timm_names_build_our_attention():
    model = timm.create_model("vit_tiny_patch16_224_dna", num_classes=7, img_size=32, depth=2)
    assert type(model).__name__ == "VisionTransformer"
    assert all(isinstance(b.attn, DenoisingAttention) for b in model.blocks)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    assert {"vit_base_patch16_224_dna", "vit_base_patch16_224_diff", "vit_small_patch16_224_cog",
            "vit_base_patch16_224_dna_shared_v"} <= set(timm.list_models("vit_*_patch16_224_*"))
    with pytest.raises(ValueError, match="no pretrained weights"):
        timm.create_model("vit_base_patch16_224_dna", pretrained=True)
    # ViT-B/16: DnA adds 2 (D^2 + D) + H per block, +16% (dna.md).
    base = timm.create_model("vit_base_patch16_224_dna")
    softmax = sum(p.numel() for p in timm.create_model("vit_base_patch16_224").parameters())
    assert sum(p.numel() for p in base.parameters()) - softmax == 12 * (2 * (768 * 768 + 768) + 12)


def test_softmax_attention_in_our_blocks_is_timms_vit():
    theirs = timm.create_model("vit_tiny_patch16_224", **{k: v for k, v in TINY.items()}, qkv_bias=True).eval()
    ours = vision_transformer("custom", attention="softmax", qkv_bias=True, **TINY).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)


def test_depth_reaches_the_attention_in_the_vit():
    diff = vision_transformer("custom", attention="diff", **TINY)
    assert [b.attn.lambda_init for b in diff.blocks] == [pytest.approx(diff_lambda_init(i)) for i in (1, 2, 3)]
    assert all(isinstance(b.attn, DifferentialAttention) for b in diff.blocks)
    cog = vision_transformer("custom", attention="cog", **TINY)
    assert [b.attn.keeps_softmax for b in cog.blocks] == [True, False, True]
    assert all(isinstance(b.attn, CogAttention) for b in cog.blocks)


def test_fused_dna_vit_checkpoint_equals_the_written_out_image_model(tmp_path):
    sd = random_dna_vit_state(depth=2, classes=5)
    path = save({"model": sd}, tmp_path / "dna_vit.pth")
    model = vision_transformer("custom", attention="dna", **{**TINY, "depth": 2}).eval()
    report = load_image_checkpoint(model, path, strict=False)
    assert report.layout == "dna_vit_fused" and not report.initialised and not report.unused
    frame = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(frame), dna_vit_logits(sd, frame, 2), **TOL)


def test_timm_vit_checkpoint_into_dna_vit_reports_the_negative_branch(tmp_path):
    source = timm.create_model("vit_tiny_patch16_224", **{**TINY, "num_classes": 9}, qkv_bias=True)
    model = vision_transformer("custom", attention="dna", qkv_bias=True, **TINY)
    report = load_image_checkpoint(model, source.state_dict(), dna_init="scaled_copy")
    assert report.initialised["blocks.0.attn.q_neg.weight"] == "dna_init=scaled_copy (eps 0.0001)"
    assert report.unused["head.weight"] == "classes differ: 9 in the checkpoint, 5 here"
    torch.testing.assert_close(model.blocks[2].attn.v_neg.weight, 1e-4 * source.blocks[2].attn.qkv.weight[64:])
    assert torch.equal(model.blocks[1].mlp.fc1.weight, source.blocks[1].mlp.fc1.weight)


@pytest.mark.slow
def test_image_fit_and_test_through_the_cli(tmp_path):
    from dna_video.training.cli import main

    root = tmp_path / "images"
    main(["fit", "--config", "configs/images_quick.yaml", f"--data.init_args.root={root}",
          "--data.init_args.train_per_class=24", "--data.init_args.val_per_class=6",
          "--data.init_args.test_per_class=5", "--data.init_args.batch_size=16",
          "--model.net_kwargs={patch_size: 8, embed_dim: 32, depth: 2, num_heads: 2}",
          "--model.attention=dna", "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false",
          "--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.init_args.save_dir={tmp_path}",
          "--trainer.logger.init_args.name=img"])
    assert sorted(p.name for p in (root / "train").iterdir()) == sorted(SYNTHETIC_SHAPES)
    assert len(list((root / "test" / "circle").glob("*.png"))) == 5
    run = tmp_path / "img" / "version_0"
    assert (run / "checkpoints" / "last.ckpt").exists() or any((run / "checkpoints").glob("best-*.ckpt"))
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    test_row = next(r for r in rows if r.get("test/top1"))
    # 20 test images: top-1 is a multiple of 1/20.
    top1 = float(test_row["test/top1"])
    assert abs(top1 * 20 - round(top1 * 20)) < 1e-4
    assert any(r.get("alpha/blocks.0.attn") for r in rows)
