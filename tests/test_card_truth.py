"""The model card tells the truth: every figure is the checkpoint's or its run's (a probe's card
describes the probe and its frozen backbone, consistently), the weights a run started from are
named with their licence (followed back through this project's own checkpoints), an image
checkpoint is refused in one line, and --out is written whole or not at all."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from torch.utils.data import DataLoader

from dna_video.checkpoints import PretrainedWeights
from dna_video.export.reference import export_reference
from dna_video.checkpoints.sources import KNOWN_WEIGHTS, weights_licence
from dna_video.models.flops import view_cost
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.probe import ProbeClassifierModule
from dna_video.tasks.video import VideoClassifier
from dna_video.tools.checkpoints import main as checkpoints_main

REPO = Path(__file__).resolve().parents[1]
V01 = REPO / "tests" / "fixtures" / "v0_1" / "runs"
TINY = TimeSformerSpec(arch="tiny", embed_dim=16, num_heads=2, depth=2, drop_path_rate=0.0, head_dropout=0.0)
# The file name of the official release's Kinetics-400 TimeSformer.
OFFICIAL_NAME = "TimeSformer_divST_8x32_224_K400.pyth"


def card_of(checkpoint: Path, tmp_path: Path) -> str:
    out = tmp_path / "MODEL_CARD.md"
    assert checkpoints_main(["card", str(checkpoint), "--out", str(out)]) == 0
    return out.read_text()


def test_the_card_of_a_probe_checkpoint_describes_the_probe_and_its_backbone_consistently(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the checkpoint names its backbone's file relative to the repository
    run = V01 / "probe" / "version_0"
    path = run / "checkpoints" / "last.ckpt"
    card = card_of(path, tmp_path)

    saved = torch.load(path, map_location="cpu", weights_only=False)
    weights = {k.removeprefix("net."): v for k, v in saved["state_dict"].items()}
    depth = len({int(k.split(".")[2]) for k in weights if k.startswith("backbone.blocks.")})
    num_probes, width = weights["probes"].shape[1:]
    heads = weights["backbone.blocks.0.attn.neg_scalers"].numel()
    patch = weights["backbone.patch_embed.proj.weight"].shape[-1]
    # One depth, width, head count and patch everywhere: those of the tensors in the file.
    assert set(re.findall(r"depth (\d+)", card)) == {str(depth)} and depth == 1
    assert set(re.findall(r"width (\d+)", card)) == {str(width)}
    assert f"| backbone (frozen) | `tiny` TimeSformer, `dna` attention: width {width}, depth {depth}, {heads} heads, patch {patch} |" in card
    assert f"| probes | {num_probes} tokens reading block(s) 0 of {depth}, interaction `replace` |" in card
    assert f"| classes | {weights['head.weight'].shape[0]} |" in card and len(saved["class_names"]) == 5

    # Parameters and cost: those of the network the task itself builds from the checkpoint.
    net = ProbeClassifierModule.load_from_checkpoint(path, map_location="cpu").net
    trained = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert trained == sum(v.numel() for k, v in weights.items() if not k.startswith("backbone."))
    cost = view_cost(net.requires_grad_(False), num_frames=4, img_size=64)
    assert cost.parameters == sum(v.numel() for v in weights.values())
    assert f"| parameters | {cost.parameters / 1e6:.2f} M ({cost.parameters:,}), of which {trained:,} trained" in card
    assert f"| cost per view | {cost.gmacs:.3g} GFLOPs" in card and cost.gmacs > 0

    # Data, recipe and results: the run's config.yaml and summary.json.
    config = yaml.safe_load((run / "config.yaml").read_text())
    data = config["data"]["init_args"]
    summary = json.loads((run / "summary.json").read_text())
    metrics = summary["test"]["metrics"]
    views = data["test_num_clips"] * data["test_num_crops"]
    assert f"| input | {data['num_frames']} frames x {data['crop_size']} x {data['crop_size']} |" in card
    assert f"| views per video | {views} (" in card
    assert f"Best validation {summary['fit']['monitor']}: {100 * summary['fit']['best_score']:.2f}%." in card
    assert (f"| test | {100 * metrics['test/top1']:.2f} | {100 * metrics['test/top5']:.2f} "
            f"| {100 * metrics['test/mca']:.2f} |") in card
    assert f"Optimiser `AdamW(lr={config['model']['optimizer']['init_args']['lr']}" in card
    assert f"{config['trainer']['max_epochs']} epochs, batch {data['batch_size']} per device" in card
    assert f"this checkpoint: epoch {saved['epoch']}, step {saved['global_step']}." in card
    assert "Checkpoint format 1 (written by dna-video 0.1)" in card and "](http" not in card

    # The backbone's weights: the video run's checkpoint named in the file, itself trained from
    # random initialisation (it records no starting weights).
    source = saved["initialised_from"]
    assert source == "tests/fixtures/v0_1/runs/video/version_0/checkpoints/last.ckpt"
    assert "initialised_from" not in torch.load(source, map_location="cpu", weights_only=False)
    assert f"| backbone weights from | `{source}` |" in card
    assert f"- `{source}`, a checkpoint of this project (read here); it started from:\n  - random initialisation" in card
    assert "No one else's weights are in this model" in card


def test_the_card_of_a_video_checkpoint_states_its_geometry_once(tmp_path):
    path = V01 / "video" / "version_0" / "checkpoints" / "best-00.ckpt"
    card = card_of(path, tmp_path)
    weights = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    depth = len({k.split(".")[2] for k in weights if k.startswith("net.blocks.")})
    assert set(re.findall(r"depth (\d+)", card)) == {str(depth)}
    assert f"| parameters | {sum(v.numel() for v in weights.values()) / 1e6:.2f} M |" in card
    assert "| started from | random initialisation |" in card


def test_an_image_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    path = V01 / "image" / "version_0" / "checkpoints" / "best-00.ckpt"
    out = tmp_path / "MODEL_CARD.md"
    assert checkpoints_main(["card", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "a checkpoint of ImageClassifier (an image model)" in err
    assert f"dna-video test --config <its run>/config.yaml --ckpt_path {path}" in err
    assert not out.exists()


def _fit_one_step(module: L.LightningModule, checkpoint: Path) -> Path:
    """One real training step of ``module`` on random clips, then the checkpoint Lightning writes."""
    data = [{"video": torch.randn(3, 4, 32, 32), "label": i % 3} for i in range(2)]
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, DataLoader(data, batch_size=2))
    trainer.save_checkpoint(checkpoint)
    return checkpoint


def test_a_card_names_the_official_weights_a_run_started_from_and_their_licence(tmp_path):
    # A file in the official release's container and name, imported by a fine-tuning run.
    torch.manual_seed(0)
    official = export_reference(TINY.build(400, 8, 32), tmp_path / "weights" / OFFICIAL_NAME)
    finetuned = VideoClassifier(num_classes=3, num_frames=4, img_size=32, network=TINY,
                                init=PretrainedWeights(source=str(official)))
    first = _fit_one_step(finetuned, tmp_path / "finetune" / "checkpoints" / "last.ckpt")
    assert torch.load(first, weights_only=True)["initialised_from"] == str(official)
    card = card_of(first, tmp_path)
    assert f"| started from | `{official}` |" in card
    assert (f"- `{official}`: the official TimeSformer release (facebookresearch/TimeSformer), licence "
            "CC-BY-NC-4.0: non-commercial use only") in card
    assert "like them, it may be used and shared for non-commercial purposes only" in card
    # No config.yaml beside this checkpoint: the card says what it does not know, invents nothing.
    assert "its data is not known here" in card and "its recipe is not known here" in card
    assert "| views per video | not known" in card and "None" not in card.split("## Reproduce")[0]
    assert "No summary.json beside the checkpoint" in card and "Not tested yet" not in card

    # A probe over that fine-tuned model inherits the restriction, through our own checkpoint.
    probe = ProbeClassifierModule(num_classes=3, num_frames=4, img_size=32, network=TINY,
                                  init=PretrainedWeights(source=str(first)), probe={"num_probes": 2})
    second = _fit_one_step(probe, tmp_path / "probe" / "checkpoints" / "last.ckpt")
    card = card_of(second, tmp_path)
    assert f"| backbone weights from | `{first}` |" in card
    assert (f"- `{first}`, a checkpoint of this project (read here); it started from:\n"
            f"  - `{official}`: the official TimeSformer release") in card
    assert "made from CC-BY-NC-4.0 weights" in card

    # Once the fine-tuned checkpoint is gone, its history cannot be read: the card says so.
    shutil.rmtree(tmp_path / "finetune")
    card = card_of(second, tmp_path)
    assert f"- `{first}`: licence unknown: dna-video does not know the licence of these weights" in card
    assert f"follows that of `{first}`, which dna-video does not know: check it" in card


@pytest.mark.parametrize("source, licence", [
    ("facebook/timesformer-base-finetuned-k400", "CC-BY-NC-4.0"),
    ("hf://facebook/timesformer-hr-finetuned-ssv2@main", "CC-BY-NC-4.0"),
    (f"/weights/{OFFICIAL_NAME}", "CC-BY-NC-4.0"),
    ("https://example.org/models/TimeSformer_divST_8_224_SSv2.pyth", "CC-BY-NC-4.0"),
    ("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", None),
    ("/weights/timesformer_k400.pyth", None),
    ("runs/paper/last.ckpt", None),
])
def test_the_licence_of_known_weight_sources(source, licence):
    known = weights_licence(source)
    assert known.licence == licence
    assert known.non_commercial == (licence == "CC-BY-NC-4.0")
    if licence is None:
        assert "check" in known.terms
    # A .pyth of another name may still be the official weights: the card says when CC-BY-NC applies.
    assert ("CC-BY-NC-4.0 applies" in known.terms) == (known.publisher == "unknown" and source.endswith(".pyth"))
    assert sum(bool(pattern.search(source)) for pattern, _ in KNOWN_WEIGHTS) <= 1  # stated once


def test_card_out_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    out = tmp_path / "MODEL_CARD.md"
    out.write_text("the previous card\n")
    real_write = Path.write_text

    def fail_half_way(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", fail_half_way)
    with pytest.raises(OSError, match="disk full"):
        checkpoints_main(["card", str(V01 / "video" / "version_0" / "checkpoints" / "best-00.ckpt"), "--out", str(out)])
    monkeypatch.undo()
    assert out.read_text() == "the previous card\n"
    assert [p.name for p in tmp_path.iterdir()] == ["MODEL_CARD.md"]  # no partial file left
