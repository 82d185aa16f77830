"""Clip transforms with torchvision.transforms.v2.

A clip travels as one uint8 tensor (T, C, H, W): v2 draws its random parameters once per
call, so every frame of a clip gets the same scale, crop and flip. uint8 is kept through
resize/crop/flip (cheap), then converted to float and normalised; the result is permuted
to the model's (C, T, H, W).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from einops import rearrange
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

__all__ = ["TrainClipTransform", "EvalClipTransform", "spatial_crops"]


class TrainClipTransform:
    """Short-side scale jitter, random square crop, optional horizontal flip, normalise.

    Args:
        short_side: (min, max) range of the random short side, e.g. (256, 320).
        crop_size: side of the square crop.
        hflip: random horizontal flip with probability 0.5.
        mean, std: per-channel normalisation of values in [0, 1].
    """

    def __init__(
        self,
        short_side: Sequence[int],
        crop_size: int,
        hflip: bool,
        mean: Sequence[float],
        std: Sequence[float],
    ) -> None:
        lo, hi = short_side
        if lo < crop_size:
            raise ValueError(f"short side jitter {short_side} must not go below crop_size={crop_size}")
        steps = [
            v2.RandomShortestSize(min_size=list(range(lo, hi + 1)), antialias=True),
            v2.RandomCrop(crop_size),
        ]
        if hflip:
            steps.append(v2.RandomHorizontalFlip())
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))]
        self.transform = v2.Compose(steps)

    def __call__(self, frames: Tensor, masks: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """uint8 (T, C, H, W) -> float (C, T, crop, crop). With ``masks`` (T, M, H, W): also
        the masks (M, T, crop, crop), under the same random scale, crop and flip (one v2 call:
        its random parameters are drawn once; masks are resized nearest)."""
        if masks is None:
            return rearrange(self.transform(frames), "t c h w -> c t h w")
        video, masks = self.transform(frames, tv_tensors.Mask(masks))
        return rearrange(video, "t c h w -> c t h w"), rearrange(masks.as_subclass(Tensor), "t m h w -> m t h w")


def spatial_crops(frames: Tensor, size: int, num_crops: int) -> list[Tensor]:
    """``num_crops`` square crops of ``size``: 1 = centre; 3 = start, centre and end of the
    long side (left/centre/right for landscape video), as in the TimeSformer test protocol."""
    h, w = frames.shape[-2:]
    if num_crops == 1:
        return [TF.center_crop(frames, [size, size])]
    if num_crops != 3:
        raise ValueError(f"num_crops must be 1 or 3, got {num_crops}")
    crops = []
    for k in range(3):
        if w >= h:
            top, left = (h - size) // 2, (w - size) * k // 2
        else:
            top, left = (h - size) * k // 2, (w - size) // 2
        crops.append(TF.crop(frames, top, left, size, size))
    return crops


class EvalClipTransform:
    """Resize the short side to ``crop_size`` and take ``num_crops`` crops, normalised.

    Returns (num_crops, C, T, crop, crop).
    """

    def __init__(self, crop_size: int, num_crops: int, mean: Sequence[float], std: Sequence[float]) -> None:
        if num_crops not in (1, 3):
            raise ValueError(f"num_crops must be 1 or 3, got {num_crops}")
        self.crop_size = crop_size
        self.num_crops = num_crops
        self.resize = v2.Resize(crop_size, antialias=True)
        self.normalize = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))])

    def __call__(self, frames: Tensor, masks: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """uint8 (T, C, H, W) -> (crops, C, T, crop, crop); with ``masks`` (T, M, H, W) also
        (crops, M, T, crop, crop): the same resize (nearest) and crops."""
        crops = spatial_crops(self.resize(frames), self.crop_size, self.num_crops)
        video = torch.stack([rearrange(self.normalize(c), "t c h w -> c t h w") for c in crops])
        if masks is None:
            return video
        masks = self.resize(tv_tensors.Mask(masks)).as_subclass(Tensor)
        return video, torch.stack([rearrange(m, "t m h w -> m t h w") for m in spatial_crops(masks, self.crop_size, self.num_crops)])
