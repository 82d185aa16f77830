"""summary.json beside a run: its figures are the run's own (checkpoints on disk, the logged test metrics)."""

import csv
import json

import pytest
import torch

from dna_video.training.cli import main
from test_cli import cli_args


@pytest.mark.slow
def test_fit_and_test_write_a_summary_of_the_run(synthetic_root, tmp_path):
    main(["fit", *cli_args(synthetic_root, tmp_path, "--trainer.max_epochs=2", "--trainer.limit_train_batches=2",
                           "--trainer.limit_val_batches=1", "--test_after_fit=true")])
    run = tmp_path / "smoke" / "version_0"
    summary = json.loads((run / "summary.json").read_text())
    fit = summary["fit"]
    assert fit["epochs"] == 2 and fit["global_step"] == 4 and fit["monitor"] == "val/top1"
    best = torch.load(fit["best_checkpoint"], weights_only=False)
    monitored = next(v for k, v in best["callbacks"].items() if "val/top1" in k)
    assert fit["best_score"] == float(monitored["best_model_score"])
    assert fit["last_checkpoint"] == str((run / "checkpoints" / "last.ckpt").resolve())
    assert torch.load(fit["last_checkpoint"], weights_only=False)["global_step"] == 4
    assert fit["throughput"]["perf/epoch_train_clips_per_s"] > 0

    with open(run / "metrics.csv") as f:
        test_row = next(r for r in csv.DictReader(f) if r.get("test/top1"))
    logged = {k: float(v) for k, v in test_row.items() if k.startswith("test/") and v}
    assert summary["test"]["metrics"] == logged
    assert summary["test"]["checkpoint"] == fit["best_checkpoint"]
    assert summary["log_dir"] == str(run.resolve())

    # The model card of the best checkpoint states the run's own figures.
    from dna_video.tools.checkpoints import main as checkpoints_main
    from dna_video.data.synthetic import SYNTHETIC_CLASSES
    from dna_video.models.flops import view_cost
    from dna_video.tasks.video import VideoClassifier

    card_file = tmp_path / "MODEL_CARD.md"
    assert checkpoints_main(["card", fit["best_checkpoint"], "--out", str(card_file)]) == 0
    card = card_file.read_text()
    net = VideoClassifier.load_from_checkpoint(fit["best_checkpoint"]).net
    cost = view_cost(net, num_frames=4, img_size=64)
    metrics = summary["test"]["metrics"]
    assert f"| parameters | {cost.parameters / 1e6:.2f} M |" in card
    assert f"| cost per view | {cost.gmacs:.3g} GFLOPs" in card and f"| views per video | 3 ({3 * cost.gmacs:.3g} GFLOPs" in card
    assert (f"| test | {100 * metrics['test/top1']:.2f} | {100 * metrics['test/top5']:.2f} "
            f"| {100 * metrics['test/mca']:.2f} |") in card
    assert f"Best validation val/top1: {100 * fit['best_score']:.2f}%" in card
    assert ", ".join(SYNTHETIC_CLASSES) in card
    assert "dna-video fit --config config.yaml" in card and "class_path: dna_video.data.SyntheticSmarthome" in card
    # The recipe is the run's (config.yaml: the quickstart's AdamW and cosine schedule), no placeholder link.
    assert "Optimiser `AdamW(lr=0.001, betas=[0.9, 0.999], eps=1e-08, weight_decay=0.05" in card
    assert "schedule `CosineAnnealingLR(T_max=16, eta_min=0.0, last_epoch=-1)`" in card
    assert "precision 32-true (float32)" in card and "](http" not in card
    assert checkpoints_main(["card", str(run / "config.yaml")]) == 1  # not a checkpoint: an error, not a traceback
