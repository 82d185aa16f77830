"""A tiny model trained in the tests on two visibly different classes of real video files
(dark and bright clips), and new videos of each class, for the analysis and prediction tests.

The videos are list-file datasets (``path label``), so the checkpoint goes through the same
Lightning path as any run: it stores the class names and the evaluation data settings.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import torch

from dna_video.data.listfile import VideoListDataModule
from dna_video.data.video import write_video
from dna_video.models.timesformer import TimeSformerSpec
from dna_video.tasks.video import Evaluation, VideoClassifier

CLASSES = ["Dark", "Bright"]
HEIGHT, WIDTH, FRAMES = 48, 64, 10


def class_frames(label: int, seed: int) -> np.ndarray:
    """(FRAMES, H, W, 3) uint8: a dark (label 0) or bright (label 1) noisy clip with a moving
    square, so the two classes differ in brightness whatever the crop."""
    rng = np.random.default_rng(seed)
    level = (40 if label == 0 else 200) + rng.uniform(-20, 20)
    frames = np.clip(level + rng.normal(0, 12, (FRAMES, HEIGHT, WIDTH, 3)), 0, 255)
    for i in range(FRAMES):
        top, left = 4 + i, 6 + 2 * i
        frames[i, top:top + 10, left:left + 10] = 255 - level
    return frames.astype(np.uint8)


def write_class_videos(root: Path, per_class: int, seed: int) -> list[tuple[Path, int]]:
    root.mkdir(parents=True, exist_ok=True)
    videos = []
    for label, name in enumerate(CLASSES):
        for k in range(per_class):
            path = root / f"{name.lower()}_{seed}_{k}.mp4"
            write_video(str(path), class_frames(label, seed * 1000 + label * 100 + k))
            videos.append((path, label))
    return videos


def datamodule(root: Path) -> VideoListDataModule:
    return VideoListDataModule(
        str(root), classes=str(root / "classes.txt"), train_list=str(root / "train.txt"), test_list=str(root / "test.txt"),
        batch_size=4, num_workers=0, num_frames=4, sampling_rate=2, target_fps=None, train_short_side=(32, 36),
        crop_size=32, test_num_clips=1, test_num_crops=3, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
    )


def train_tiny_model(root: Path) -> Path:
    """Train a tiny DnA TimeSformer on dark vs bright videos; returns its checkpoint."""
    train = write_class_videos(root / "train", 4, seed=1)
    test = write_class_videos(root / "test", 3, seed=2)
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    for name, videos in (("train", train), ("test", test)):
        (root / f"{name}.txt").write_text("".join(f"{p.relative_to(root)} {label}\n" for p, label in videos))
    torch.manual_seed(0)
    model = VideoClassifier(
        num_classes=2, num_frames=4, img_size=32,
        network=TimeSformerSpec(arch="tiny", attention="dna", embed_dim=16, depth=1, num_heads=2, patch_size=8,
                                drop_path_rate=0.0, head_dropout=0.0),
        optimizer={"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.01}},
        lr_scheduler=None, evaluation=Evaluation(view_aggregation="sum"),
    )
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=12, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(root / "run"), limit_val_batches=0, num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=datamodule(root))
    ckpt = root / "run" / "tiny.ckpt"
    trainer.save_checkpoint(ckpt)
    return ckpt
