"""Image classification data: the torchvision ImageFolder layout (``root/train/<class>/*``,
``root/val/<class>/*``, optional ``root/test/<class>/*``; ImageNet's), the reference's
ImageNet augmentation from ``torchvision.transforms.v2`` (RandomResizedCrop, flip,
RandAugment, random erasing; MixUp / CutMix on the batch), and a generated image folder for
CPU runs and tests (:class:`SyntheticImageFolder`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, default_collate
from torchvision.datasets import ImageFolder
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2

from dna_video.common.defaults import IMG_SIZE

log = logging.getLogger(__name__)

__all__ = ["ImageFolderDataModule", "SyntheticImageFolder", "generate_synthetic_images", "SYNTHETIC_SHAPES"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageFolderDataModule(L.LightningDataModule):
    """Images in class folders: ``root/{train,val[,test]}/<class>/<image>``.

    Args:
        root: dataset folder holding ``train/`` and ``val/`` (and optionally ``test/``; the
            val split is tested when there is none).
        img_size: training crop and evaluation size (linked to the model).
        batch_size: images per batch per device.
        num_workers: DataLoader worker processes.
        rand_augment_magnitude: RandAugment magnitude (2 ops); 0 turns it off. 9 in the recipe.
        random_erasing: probability of random erasing (0.25 in the recipe).
        mixup_alpha: MixUp alpha on training batches (0.8 in the recipe; 0: off).
        cutmix_alpha: CutMix alpha on training batches (1.0 in the recipe; 0: off). With both,
            each batch takes one of the two at random (timm's switch probability 0.5).
        crop_pct: evaluation resize = img_size / crop_pct, then a centre crop.
        min_crop_scale: smallest area share of RandomResizedCrop (0.08 as in ImageNet training).
    """

    #: What the data fixes of the model: model argument -> the attribute that holds it (linked by
    #: the command line, docs/configs.md).
    MODEL_INPUTS = {"num_classes": "num_classes", "img_size": "img_size"}

    def __init__(
        self,
        root: str,
        img_size: int = IMG_SIZE,
        batch_size: int = 128,
        num_workers: int = 8,
        rand_augment_magnitude: int = 9,
        random_erasing: float = 0.25,
        mixup_alpha: float = 0.8,
        cutmix_alpha: float = 1.0,
        crop_pct: float = 0.875,
        min_crop_scale: float = 0.08,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.root = Path(root)
        self.img_size = img_size
        self.batch_size = batch_size
        self.num_workers = num_workers
        self._classes: list[str] | None = None
        self.datasets: dict[str, ImageFolder] = {}

    @property
    def classes(self) -> list[str]:
        if self._classes is None:
            train = self.root / "train"
            if not train.is_dir():
                raise FileNotFoundError(
                    f"{train}: no training folder; the image data module expects {self.root}/train/<class>/<image> "
                    f"and {self.root}/val/<class>/<image> (the ImageFolder layout)"
                )
            self._classes = sorted(p.name for p in train.iterdir() if p.is_dir())
        return self._classes

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def train_transform(self) -> v2.Transform:
        hp = self.hparams
        steps: list[v2.Transform] = [
            v2.ToImage(),
            v2.RandomResizedCrop(self.img_size, scale=(hp.min_crop_scale, 1.0), interpolation=InterpolationMode.BICUBIC, antialias=True),
            v2.RandomHorizontalFlip(),
        ]
        if hp.rand_augment_magnitude > 0:
            steps.append(v2.RandAugment(num_ops=2, magnitude=hp.rand_augment_magnitude))
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        if hp.random_erasing > 0:
            steps.append(v2.RandomErasing(p=hp.random_erasing, value=0))
        return v2.Compose(steps)

    def eval_transform(self) -> v2.Transform:
        resize = int(round(self.img_size / self.hparams.crop_pct))
        return v2.Compose([
            v2.ToImage(),
            v2.Resize(resize, interpolation=InterpolationMode.BICUBIC, antialias=True),
            v2.CenterCrop(self.img_size),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ])

    def _split(self, name: str) -> ImageFolder:
        folder = self.root / name
        dataset = ImageFolder(str(folder), transform=self.train_transform() if name == "train" else self.eval_transform())
        if dataset.classes != self.classes:
            raise ValueError(f"{folder}: classes {dataset.classes} differ from train's {self.classes}")
        return dataset

    def setup(self, stage: str | None = None) -> None:
        splits = ["train", "val"] + (["test"] if (self.root / "test").is_dir() else [])
        for name in splits:
            if name not in self.datasets:
                self.datasets[name] = self._split(name)
                log.info("%s: %d images, %d classes", name, len(self.datasets[name]), self.num_classes)

    def _mix_collate(self):
        hp = self.hparams
        mixers = []
        if hp.mixup_alpha > 0:
            mixers.append(v2.MixUp(alpha=hp.mixup_alpha, num_classes=self.num_classes))
        if hp.cutmix_alpha > 0:
            mixers.append(v2.CutMix(alpha=hp.cutmix_alpha, num_classes=self.num_classes))
        if not mixers:
            return default_collate
        mix = mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)
        return _MixCollate(mix)

    def _loader(self, name: str, train: bool) -> DataLoader:
        return DataLoader(
            self.datasets[name], batch_size=self.batch_size, shuffle=train, drop_last=train,
            num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
            collate_fn=self._mix_collate() if train else default_collate,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test" if "test" in self.datasets else "val", False)


class _MixCollate:
    """Batch, then MixUp / CutMix: labels become (B, K) class probabilities. A class (not a
    closure) so that worker processes can unpickle it."""

    def __init__(self, mix: v2.Transform) -> None:
        self.mix = mix

    def __call__(self, batch):
        return self.mix(*default_collate(batch))


# -- generated image folder -------------------------------------------------------------------
SYNTHETIC_SHAPES = ("circle", "square", "triangle", "cross")


SHAPE_CONTRASTS = ("random", "bright")


def _render(shape: int, rng: np.random.Generator, size: int, contrast: str = "random") -> np.ndarray:
    """One RGB image (size, size, 3) uint8: a shape of random colour, position and scale on
    a noisy background of another colour.

    Args:
        contrast: ``random``: the shape's colour is the background's plus 90-165 modulo 255 per
            channel, so each channel's contrast sign is random (a from-scratch ViT stays near
            chance on a few hundred such images; a CNN does not). ``bright``: a darker
            background (0-100) and the shape 90-155 brighter in every channel, one contrast
            sign, which a small ViT learns from a few hundred images.
    """
    if contrast not in SHAPE_CONTRASTS:
        raise ValueError(f"unknown shape contrast {contrast!r}; choose one of {SHAPE_CONTRASTS}")
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    background = rng.uniform(0, 255 if contrast == "random" else 100, 3)
    image = np.clip(background + rng.normal(0, 20, (size, size, 3)), 0, 255)
    r = rng.uniform(0.18, 0.3) * size
    cy, cx = rng.uniform(r, size - r, 2)
    dy, dx = yy - cy, xx - cx
    if shape == 0:
        mask = dy**2 + dx**2 <= r**2
    elif shape == 1:
        mask = (abs(dy) <= r * 0.8) & (abs(dx) <= r * 0.8)
    elif shape == 2:
        mask = (dy <= r * 0.7) & (dy >= -r) & (abs(dx) <= (dy + r) * 0.6)
    else:
        mask = ((abs(dy) <= r * 0.3) & (abs(dx) <= r)) | ((abs(dx) <= r * 0.3) & (abs(dy) <= r))
    if contrast == "random":
        colour = (background + rng.uniform(90, 165, 3)) % 255
    else:
        colour = background + rng.uniform(90, 155, 3)
    image[mask] = colour
    return image.astype(np.uint8)


def generate_synthetic_images(
    root: str | Path, per_class: dict[str, int], size: int = 32, seed: int = 0, contrast: str = "random"
) -> Path:
    """Write PNG images of :data:`SYNTHETIC_SHAPES` to ``root/<split>/<shape>/<n>.png``,
    ``per_class[split]`` images per shape, shapes drawn with ``contrast`` (see :func:`_render`);
    splits that exist already are kept (use another ``root`` for another contrast)."""
    # Pillow, not torchvision.io.write_png: torchvision's image encoders are deprecated
    # (a DeprecationWarning per image).
    from PIL import Image

    root = Path(root)
    for split_index, (split, count) in enumerate(per_class.items()):
        if (root / split).is_dir():
            continue
        rng = np.random.default_rng([seed, split_index])
        tmp = root / f".{split}.partial"
        for label, name in enumerate(SYNTHETIC_SHAPES):
            (tmp / name).mkdir(parents=True, exist_ok=True)
            for n in range(count):
                Image.fromarray(_render(label, rng, size, contrast)).save(tmp / name / f"{n:04d}.png")
        tmp.rename(root / split)
    return root


class SyntheticImageFolder(ImageFolderDataModule):
    """An :class:`ImageFolderDataModule` over generated images (shapes on noisy backgrounds,
    :data:`SYNTHETIC_SHAPES`), written to ``root`` on first use: for CPU runs and tests.

    Args:
        root: where the images are written (kept and reused).
        train_per_class, val_per_class, test_per_class: images per class and split.
        image_size: side of the generated images.
        shape_contrast: ``random`` (each channel's contrast sign random; hard for a ViT from
            scratch) or ``bright`` (shapes brighter than the background); see :func:`_render`.
        (the rest: :class:`ImageFolderDataModule`)
    """

    def __init__(
        self,
        root: str = ".cache/synthetic_images",
        img_size: int = 32,
        batch_size: int = 32,
        num_workers: int = 0,
        rand_augment_magnitude: int = 0,
        random_erasing: float = 0.0,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        crop_pct: float = 1.0,
        min_crop_scale: float = 0.5,
        train_per_class: int = 100,
        val_per_class: int = 20,
        test_per_class: int = 20,
        image_size: int = 32,
        shape_contrast: str = "random",
    ) -> None:
        generate_synthetic_images(
            root, {"train": train_per_class, "val": val_per_class, "test": test_per_class}, size=image_size,
            contrast=shape_contrast,
        )
        super().__init__(root, img_size, batch_size, num_workers, rand_augment_magnitude, random_erasing,
                         mixup_alpha, cutmix_alpha, crop_pct, min_crop_scale)
