"""Section 2: whole models. Our DnA-TimeSformer and softmax TimeSformer against Hugging Face
``TimesformerForVideoClassification`` built from a ``TimesformerConfig`` of the same geometry
(random weights, nothing downloaded).

* Train step = forward, cross-entropy, backward and an SGD (momentum 0.9) step, at a reduced
  geometry that fits a 2-core CPU: TimeSformer-B width (D 768, 12 heads, MLP 3072,
  patch 16, 8 x 224 x 224 input) with fewer blocks. Every block is exactly a TimeSformer-B
  block, so per-block cost ratios are those of the full model.
* Inference clips/s at the full ``base`` geometry (12 blocks), no grad, eval mode.
* The quickstart geometry (``configs/quickstart.yaml``: D 64, 2 heads, 4 blocks, patch 8,
  8 x 64 x 64, batch 8).
* Speed features on our DnA model: bf16 autocast (what ``--trainer.precision bf16-mixed``
  does), activation checkpointing per block, and optionally ``torch.compile``. Under bf16
  autocast also the same DnA model with the fused attention kernel forced at the spatial
  length (``explicit_max_len_cpu_low_precision = 0``), the choice before the bf16-aware one.

Peak memory is the peak of live tensor bytes during one train step above what is live
before it (parameters and optimiser state), see :func:`benchmarks.harness.peak_memory`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from dna_video.models.timesformer import TimeSformer

from .harness import Row, interleaved, peak_memory, rate_row, time_row

__all__ = ["Geometry", "REDUCED", "BASE", "QUICKSTART", "run", "flop_ratio", "build_ours", "build_hf"]

NUM_CLASSES = 31  # Toyota Smarthome cross-subject


@dataclass(frozen=True)
class Geometry:
    embed_dim: int
    depth: int
    num_heads: int
    patch_size: int
    img_size: int
    num_frames: int
    batch: int

    def describe(self) -> str:
        return (f"D {self.embed_dim}, {self.num_heads} heads, depth {self.depth}, "
                f"{self.num_frames}x{self.img_size}x{self.img_size}/{self.patch_size}, batch {self.batch}")


REDUCED = Geometry(768, 2, 12, 16, 224, 8, 1)
BASE = Geometry(768, 12, 12, 16, 224, 8, 1)
QUICKSTART = Geometry(64, 4, 2, 8, 64, 8, 8)


def flop_ratio(g: Geometry) -> float:
    """DnA / softmax multiply-adds per token of one divided space-time block: projections,
    temporal_fc and MLP 21 D^2 vs 17 D^2, attention scores and values 4 L D vs 2 L D over the
    spatial (L = patches + 1) and temporal (L = frames) sequences."""
    d = g.embed_dim
    lengths = (g.img_size // g.patch_size) ** 2 + 1 + g.num_frames
    return (21 * d * d + 4 * lengths * d) / (17 * d * d + 2 * lengths * d)


def build_ours(g: Geometry, attention: str) -> TimeSformer:
    return TimeSformer(
        num_classes=NUM_CLASSES, img_size=g.img_size, num_frames=g.num_frames, patch_size=g.patch_size,
        embed_dim=g.embed_dim, depth=g.depth, num_heads=g.num_heads, attention=attention,
        drop_path_rate=0.0,
    )


class HFTimeSformer(nn.Module):
    """Hugging Face's model behind our input layout (B, C, T, H, W) -> logits."""

    def __init__(self, g: Geometry) -> None:
        super().__init__()
        from transformers import TimesformerConfig, TimesformerForVideoClassification

        config = TimesformerConfig(
            image_size=g.img_size, patch_size=g.patch_size, num_channels=3, num_frames=g.num_frames,
            hidden_size=g.embed_dim, num_hidden_layers=g.depth, num_attention_heads=g.num_heads,
            intermediate_size=4 * g.embed_dim, num_labels=NUM_CLASSES, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, qkv_bias=True, layer_norm_eps=1e-6,
            attention_type="divided_space_time",
        )
        self.model = TimesformerForVideoClassification(config)

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        # The input is made in this layout once (below), outside the timed step.
        return self.model(pixel_values=video).logits


def build_hf(g: Geometry) -> HFTimeSformer:
    return HFTimeSformer(g)


def _inputs(g: Geometry, hf: bool) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    video = torch.randn(g.batch, 3, g.num_frames, g.img_size, g.img_size, generator=gen)
    if hf:  # HF takes (B, T, C, H, W)
        video = video.transpose(1, 2).contiguous()
    return video, torch.randint(0, NUM_CLASSES, (g.batch,), generator=gen)


def train_step(
    model: nn.Module, video: torch.Tensor, target: torch.Tensor, bf16: bool = False
) -> Callable[[], None]:
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def step() -> None:
        with torch.autocast(video.device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(video), target)
        loss.backward()
        optimizer.step()
        # Gradients freed at the end rather than the start: the same peak within a step, and
        # no tensor from before a measured step is freed inside it (see peak_memory).
        optimizer.zero_grad(set_to_none=True)

    return step


def inference(model: nn.Module, video: torch.Tensor) -> Callable[[], None]:
    model.eval()

    def step() -> None:
        with torch.no_grad():
            model(video)

    return step


def _train_cases(g: Geometry, features: bool = False) -> dict[str, Callable[[], None]]:
    """Train steps of the three models; with ``features`` also bf16 autocast (ours and HF's)
    and activation checkpointing (DnA)."""
    torch.manual_seed(0)
    ours_in, hf_in = _inputs(g, hf=False), _inputs(g, hf=True)
    cases = {
        "DnA": train_step(build_ours(g, "dna"), *ours_in),
        "softmax": train_step(build_ours(g, "softmax"), *ours_in),
        "HF": train_step(build_hf(g), *hf_in),
    }
    if features:
        checkpointed = build_ours(g, "dna")
        checkpointed.grad_checkpointing = True
        fused_bf16 = build_ours(g, "dna")
        for attn in fused_bf16.attention_modules().values():
            attn.explicit_max_len_cpu_low_precision = 0  # the fused kernel at every length > 16
        cases.update({
            "DnA bf16": train_step(build_ours(g, "dna"), *ours_in, bf16=True),
            "DnA bf16 fused": train_step(fused_bf16, *ours_in, bf16=True),
            "HF bf16": train_step(build_hf(g), *hf_in, bf16=True),
            "DnA ckpt": train_step(checkpointed, *ours_in),
        })
    return cases


def _memory_after_warmup(step: Callable[[], None]) -> float:
    step()  # optimiser state exists from here on, as in training
    return peak_memory(step) / 2**20


def run(rounds: int = 5, quick: bool = False, compile: bool = False) -> list[Row]:
    rows: list[Row] = []
    sec = "model"

    # Train step at the reduced geometry: the three models and the speed features, interleaved.
    g = REDUCED
    case = f"train step, {g.describe()}"
    cases = _train_cases(g, features=True)
    t = interleaved(cases, rounds=max(3, rounds // 2) if quick else rounds)
    mem = {k: _memory_after_warmup(cases[k]) for k in ("DnA", "softmax", "HF", "DnA ckpt", "DnA bf16", "DnA bf16 fused",
                                                       "HF bf16")}
    r = flop_ratio(g)
    rows += [
        time_row(sec, case, "ms", "DnA", t["DnA"], "our softmax", t["softmax"], f"<= 1.3 (FLOP ratio {r:.2f})", 1.3),
        time_row(sec, case, "ms", "our softmax", t["softmax"], "HF softmax", t["HF"], "<= 1.0 (stretch <= 0.83)", 1.0),
        time_row(sec, case, "ms", "DnA", t["DnA"], "HF softmax", t["HF"], "<= 1.2 (stretch <= 1.0)", 1.2),
        Row(sec, case, "peak MiB", "our softmax", mem["softmax"], "HF softmax", mem["HF"],
            "<= 0.8", mem["softmax"] / mem["HF"] <= 0.8),
        Row(sec, case, "peak MiB", "DnA", mem["DnA"], "HF softmax", mem["HF"]),
        time_row(sec, case, "ms", "DnA bf16 autocast", t["DnA bf16"], "HF bf16 autocast", t["HF bf16"]),
        time_row(sec, case, "ms", "DnA bf16 autocast", t["DnA bf16"], "DnA bf16, fused kernel at 197 tokens",
                 t["DnA bf16 fused"]),
        Row(sec, case, "peak MiB", "DnA bf16 autocast", mem["DnA bf16"], "DnA bf16, fused kernel at 197 tokens",
            mem["DnA bf16 fused"]),
        Row(sec, case, "peak MiB", "DnA bf16 autocast", mem["DnA bf16"], "HF bf16 autocast", mem["HF bf16"]),
        time_row(sec, case, "ms", "DnA bf16 autocast", t["DnA bf16"], "DnA fp32", t["DnA"]),
        time_row(sec, case, "ms", "DnA grad checkpointing", t["DnA ckpt"], "DnA", t["DnA"]),
        Row(sec, case, "peak MiB", "DnA grad checkpointing", mem["DnA ckpt"], "DnA", mem["DnA"]),
    ]
    if compile:
        torch.manual_seed(0)
        video, target = _inputs(g, hf=False)
        compiled = train_step(torch.compile(build_ours(g, "dna")), video, target)
        start = time.perf_counter()
        compiled()  # compiles forward and backward
        compile_s = time.perf_counter() - start
        t = interleaved({"eager": cases["DnA"], "compiled": compiled}, rounds=max(3, rounds // 2), warmup=1)
        rows.append(time_row(sec, case, "ms", f"DnA torch.compile (first step {compile_s:.0f} s)", t["compiled"],
                             "DnA eager", t["eager"]))
    del cases

    # Inference at the full base geometry.
    g = BASE
    case = f"inference, {g.describe()}"
    torch.manual_seed(0)
    ours_video, _ = _inputs(g, hf=False)
    hf_video, _ = _inputs(g, hf=True)
    cases = {
        "DnA": inference(build_ours(g, "dna"), ours_video),
        "softmax": inference(build_ours(g, "softmax"), ours_video),
        "HF": inference(build_hf(g), hf_video),
    }
    # A forward at base geometry takes seconds: fewer rounds than the train steps, but at least 3
    # after the warm-up call (2 in a --quick smoke run).
    t = interleaved(cases, rounds=2 if quick else max(3, rounds // 2), warmup=1)
    rows += [
        rate_row(sec, case, g.batch, "our softmax", t["softmax"], "HF softmax", t["HF"], ">= 1.0", 1.0),
        rate_row(sec, case, g.batch, "DnA", t["DnA"], "HF softmax", t["HF"]),
        rate_row(sec, case, g.batch, "DnA", t["DnA"], "our softmax", t["softmax"], f"FLOP ratio 1/{flop_ratio(g):.2f}"),
    ]
    del cases

    # The quickstart's tiny model: where most users first meet the speed of DnA.
    g = QUICKSTART
    case = f"train step, quickstart: {g.describe()}"
    cases = _train_cases(g)
    t = interleaved(cases, rounds=max(5, rounds) if quick else 3 * rounds)
    rows += [
        time_row(sec, case, "ms", "DnA", t["DnA"], "our softmax", t["softmax"], f"FLOP ratio {flop_ratio(g):.2f}"),
        time_row(sec, case, "ms", "our softmax", t["softmax"], "HF softmax", t["HF"]),
        time_row(sec, case, "ms", "DnA", t["DnA"], "HF softmax", t["HF"]),
    ]
    return rows
