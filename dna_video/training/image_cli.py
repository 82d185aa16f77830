"""Image classification command line (the paper's ViT-B/16 with DnA):

    python -m dna_video.training.image_cli fit --config configs/imagenet_vit_b.yaml --data.root /data/imagenet
    python -m dna_video.training.image_cli fit --config configs/images_quick.yaml      # generated images, CPU minutes
    python -m dna_video.training.image_cli test --config configs/images_quick.yaml --ckpt_path <checkpoint>

A LightningCLI over :class:`~dna_video.tasks.image.ImageClassifier` and the ImageFolder
DataModules (:mod:`dna_video.data.images`); the class count and image size are linked from the
data to the model. ``fit --test_after_fit true`` tests the best checkpoint after training.
"""

from __future__ import annotations

import os

os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see cli.py

from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI  # noqa: E402

from dna_video.data.images import ImageFolderDataModule, SyntheticImageFolder  # noqa: E402,F401
from dna_video.tasks.image import ImageClassifier  # noqa: E402


class ImageCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.init_args.img_size", "model.img_size")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({"checkpoint.monitor": "val/top1", "checkpoint.mode": "max",
                             "checkpoint.filename": "best-{epoch:02d}", "checkpoint.auto_insert_metric_name": False})
        parser.add_argument("--test_after_fit", type=bool, default=False,
                            help="After fit, test the best checkpoint (fit subcommand only).")

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit"):
            best = self.trainer.checkpoint_callback and self.trainer.checkpoint_callback.best_model_path
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path="best" if best else None)


def main(args: list[str] | None = None, run: bool = True) -> ImageCLI:
    return ImageCLI(ImageClassifier, ImageFolderDataModule, subclass_mode_data=True,
                    save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False, args=args, run=run)


if __name__ == "__main__":
    main()
