"""Activation checkpointing (``--model.network.grad_checkpointing true`` and its finer settings
``grad_checkpointing_every``, ``grad_checkpointing_part``): the same outputs and gradients as
without it, less peak memory, the options typed in the spec and kept in checkpoints (old ones,
without the finer settings, still load). The curve at TimeSformer-B size:
``python -m benchmarks --sections memory``."""

from collections import Counter
from dataclasses import asdict

import lightning
import pytest
import torch
from torch import nn

from benchmarks.harness import peak_memory
from dna_video.checkpoints.upgrade import FORMAT_KEY, FORMAT_VERSION
from dna_video.models.timesformer import TimeSformerSpec, timesformer
from dna_video.tasks.video import VideoClassifier

# (grad_checkpointing, grad_checkpointing_every, grad_checkpointing_part)
SETTINGS = {
    "every block": (True, 1, "block"),
    "every 2nd block": (True, 2, "block"),
    "attention": (True, 1, "attention"),
    "attention, every 2nd block": (True, 2, "attention"),
}


def randomised(depth: int = 3, frames: int = 4, **kwargs) -> nn.Module:
    """A tiny DnA TimeSformer (17 spatial tokens: the fused attention path; 4 frames: the
    explicit one), every weight perturbed so that ``temporal_fc`` (zero at the start) and with
    it the temporal attention count."""
    torch.manual_seed(0)
    net = timesformer("tiny", num_classes=5, img_size=32, num_frames=frames, depth=depth, attention="dna", **kwargs)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return net


def configure(net: nn.Module, setting: tuple[bool, int, str]) -> nn.Module:
    net.grad_checkpointing, net.grad_checkpointing_every, net.grad_checkpointing_part = setting
    return net


def train_step(net: nn.Module, video: torch.Tensor) -> dict[str, torch.Tensor]:
    net.zero_grad(set_to_none=True)
    torch.manual_seed(5)  # the same drop-path draws in every run
    out = net(video)
    out.square().sum().backward()
    return {"output": out.detach(), **{name: p.grad for name, p in net.named_parameters()}}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_every_setting_gives_the_outputs_and_gradients_of_no_checkpointing(setting):
    # 3 blocks: every 2nd recomputes blocks 0 and 2, not 1. Drop-path on, in training: the
    # recomputation must draw what the forward drew.
    video = torch.randn(2, 3, 4, 32, 32, generator=torch.Generator().manual_seed(2))
    plain = train_step(randomised(drop_path_rate=0.2), video)
    ours = train_step(configure(randomised(drop_path_rate=0.2), SETTINGS[setting]), video)
    for name in plain:
        torch.testing.assert_close(ours[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)
    # Without gradients nothing is recomputed and the output is the same.
    net = configure(randomised(drop_path_rate=0.2).eval(), SETTINGS[setting])
    with torch.no_grad():
        torch.testing.assert_close(net(video), configure(net, (False, 1, "block"))(video), rtol=0, atol=0)


def test_each_setting_lowers_the_peak_memory():
    # 8 frames: the temporal attention takes the fused path, as at TimeSformer-B's 16 or 32.
    # 4 blocks: every 2nd recomputes blocks 0 and 2.
    net = randomised(depth=4, frames=8)
    video = torch.randn(1, 3, 8, 32, 32, generator=torch.Generator().manual_seed(2))

    def peak(setting: tuple[bool, int, str]) -> int:
        configure(net, setting)
        net.zero_grad(set_to_none=True)
        return peak_memory(lambda: net(video).square().sum().backward())

    none = peak((False, 1, "block"))
    mib = {name: peak(setting) / 2**20 for name, setting in SETTINGS.items()}
    print(f"\n[peak MiB without checkpointing {none / 2**20:.1f}: " + ", ".join(f"{k} {v:.1f}" for k, v in mib.items()) + "]")
    assert all(value * 2**20 < none for value in mib.values()), mib
    # Every 2nd block lies between every block and none. (Which part pays more depends on the
    # geometry: at this width the attention alone, at TimeSformer-B's whole blocks.)
    assert mib["every block"] < mib["every 2nd block"] and mib["attention"] < mib["attention, every 2nd block"]


def test_the_options_are_typed_and_kept_in_checkpoints(tmp_path):
    spec = TimeSformerSpec(arch="tiny", grad_checkpointing=True, grad_checkpointing_every=2,
                           grad_checkpointing_part="attention")
    module = VideoClassifier(num_classes=5, num_frames=4, img_size=32, network=spec)
    net = module.net
    assert (net.grad_checkpointing, net.grad_checkpointing_every, net.grad_checkpointing_part) == (True, 2, "attention")
    assert module.hparams["network"]["grad_checkpointing_every"] == 2
    assert module.hparams["network"]["grad_checkpointing_part"] == "attention"

    def save(hparams: dict, name: str) -> str:
        path = str(tmp_path / name)
        torch.save({"state_dict": module.state_dict(), "hyper_parameters": hparams, FORMAT_KEY: FORMAT_VERSION,
                    "pytorch-lightning_version": lightning.__version__}, path)
        return path

    restored = VideoClassifier.load_from_checkpoint(save(dict(module.hparams), "new.ckpt")).net
    assert (restored.grad_checkpointing_every, restored.grad_checkpointing_part) == (2, "attention")
    # A checkpoint written before the finer settings existed: every block, whole.
    old_network = {k: v for k, v in module.hparams["network"].items() if not k.startswith("grad_checkpointing_")}
    old = VideoClassifier.load_from_checkpoint(save({**module.hparams, "network": old_network}, "old.ckpt")).net
    assert (old.grad_checkpointing, old.grad_checkpointing_every, old.grad_checkpointing_part) == (True, 1, "block")
    assert TimeSformerSpec.of(asdict(spec)) == spec

    with pytest.raises(ValueError, match="grad_checkpointing_every=0"):
        TimeSformerSpec(arch="tiny", grad_checkpointing_every=0).build(5, 4, 32)
    with pytest.raises(ValueError, match="grad_checkpointing_part='mlp'"):
        TimeSformerSpec(arch="tiny", grad_checkpointing_part="mlp").build(5, 4, 32)


# (depth, grad_checkpointing_every) -> the blocks the docs say are recomputed: 0, k, 2k, ...
RECOMPUTED = {
    (4, 1): {0, 1, 2, 3},
    (4, 2): {0, 2},
    (5, 2): {0, 2, 4},
    (6, 3): {0, 3},
    (3, 4): {0},
}


@pytest.mark.parametrize("part", ["block", "attention"])
@pytest.mark.parametrize("depth, every", list(RECOMPUTED))
def test_backward_recomputes_exactly_blocks_0_k_2k(depth, every, part):
    """Which sublayers backward starts a second time, counted by forward pre-hooks (a
    recomputation may stop once it has what backward needs, before a module returns): with
    ``block`` the chosen blocks (and their attentions), with ``attention`` only the chosen
    blocks' two attentions, never a block or an MLP; forward runs everything once. Outputs and
    gradients cannot tell which blocks were chosen (any choice gives the same)."""
    net = configure(randomised(depth=depth), (True, every, part)).train()
    calls: Counter = Counter()
    for index, block in enumerate(net.blocks):
        for name, module in (("block", block), ("spatial", block.attn), ("temporal", block.temporal_attn),
                             ("mlp", block.mlp)):
            module.register_forward_pre_hook(lambda *_, key=(name, index): calls.update([key]))
    video = torch.randn(2, 3, 4, 32, 32, generator=torch.Generator().manual_seed(2))
    out = net(video)
    assert set(calls.values()) == {1} and len(calls) == 4 * depth
    calls.clear()
    out.square().sum().backward()
    again = {name: {i for (n, i) in calls if n == name} for name in ("block", "spatial", "temporal", "mlp")}
    chosen = RECOMPUTED[(depth, every)]
    assert (again["spatial"], again["temporal"]) == (chosen, chosen)
    if part == "block":
        assert again["block"] == chosen and again["mlp"] <= chosen
    else:
        assert again["block"] == again["mlp"] == set()
    assert set(calls.values()) == {1}  # once each, not more
