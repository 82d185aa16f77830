"""A checkpoint's network over sliding windows (a long video's timeline, a live stream): each
frame prepared once into the evaluation's views, windows of such frames to class probabilities,
and, when asked, the spatial attention the network paid in each window.

The numpy side (which frames, when; files) is :mod:`.windows` and :mod:`.stream`; this is the
PyTorch network they call (:mod:`dna_video.runtime` is the ONNX Runtime one).

Attention. With ``attention=True`` the last block's spatial attention runs on its written-out
path (:func:`~dna_video.analysis.maps.capture_maps`: the same logits, plus the maps) and each
window keeps the cls token's attention over the patches of its centre crop, per branch (DnA:
``positive`` and ``negative``; softmax: ``softmax``), averaged over the window's frames and the
heads: (h, w) per branch in :attr:`WindowNetwork.window_maps`, one entry per window in order.
"""

from __future__ import annotations

import numpy as np
import torch
from einops import rearrange, reduce
from torch import Tensor

from dna_video.analysis.inference import LoadedModel, device_of
from dna_video.analysis.maps import attention_module_names, capture_maps, cls_maps
from dna_video.data.transforms import EvalClipTransform
from dna_video.models.attention import kind_of
from dna_video.tasks.views import mean_view_probs

__all__ = ["WindowNetwork"]


class WindowNetwork:
    """``model``'s network on ``device`` for windows of prepared frames.

    Args:
        model: the checkpoint's network and evaluation settings (crop, crops, mean, std,
            how views combine).
        device: cpu, cuda... (None: cuda when available).
        attention: keep each window's spatial attention maps (see the module's docstring).
    """

    def __init__(self, model: LoadedModel, device: str | None = None, attention: bool = False) -> None:
        settings = model.settings
        self.target = device_of(device)
        self.net = model.net.to(self.target).eval()
        self.aggregate = model.aggregate
        self.transform = EvalClipTransform(settings.crop_size, settings.num_crops, settings.mean, settings.std)
        self.attention_module = attention_module_names(self.net, [-1], ["spatial"])[0] if attention else None
        #: per window answered with ``attention``: branch -> (h, w) map of the centre crop.
        self.window_maps: list[dict[str, np.ndarray]] = []

    @torch.no_grad()
    def prepare(self, frames: np.ndarray) -> Tensor:
        """(n, H, W, 3) uint8 -> (n, crops, C, crop, crop): each frame resized, cropped and
        normalised once, as evaluation does a clip's (the same steps, frame by frame)."""
        return rearrange(self.transform(torch.from_numpy(frames).permute(0, 3, 1, 2)), "s c t h w -> t s c h w")

    @torch.no_grad()
    def probs_of(self, windows: list[Tensor]) -> np.ndarray:
        """Windows of prepared frames, each (T, crops, C, crop, crop) -> (B, K) probabilities,
        each window's crops combined as the model was evaluated."""
        views = rearrange(torch.stack(windows), "b t s c h w -> b s c t h w").contiguous().to(self.target)
        if self.attention_module is None:
            logits = self.net(views.flatten(0, 1))
        else:
            logits, captured = capture_maps(self.net, views.flatten(0, 1), [self.attention_module])
            self._keep_maps(captured[self.attention_module], views.shape)
        logits = logits.unflatten(0, views.shape[:2]).float()
        return mean_view_probs(logits, self.aggregate).cpu().numpy()

    def _keep_maps(self, maps: dict[str, Tensor], shape: torch.Size) -> None:
        """The centre crop's cls maps of each window, averaged over its frames."""
        batch, crops, _, frames, height, width = shape
        patch = self.net.patch_size
        kind = kind_of(self.net.attention_modules()[self.attention_module])
        per_branch = cls_maps(maps, frames, (height // patch, width // patch), kind=kind)  # (b s) t h w
        centre = crops // 2  # 1 crop: the centre; 3 crops: start, centre, end
        means = {name: reduce(rearrange(m, "(b s) t h w -> b s t h w", b=batch)[:, centre], "b t h w -> b h w", "mean")
                 .float().cpu().numpy() for name, m in per_branch.items()}
        self.window_maps += [{name: m[b] for name, m in means.items()} for b in range(batch)]
