"""Paired initialisation: networks that differ only in their attention kind start from the same
weights wherever they can, whatever the global random state.

A pair is softmax attention's network and a kind's network of the same architecture. For a
``pair_seed``:

* every tensor the kind's network shares with the softmax network (same name and shape) is
  copied from one initialisation: the softmax network of that architecture (the *twin*), built
  with its own initialisation from a random stream seeded from ``pair_seed``;
* every other tensor (the kind's extras: Q-, V-, alpha, lambda, ...) keeps the kind's own
  initialisation, drawn from a separate stream seeded from ``pair_seed``.

Each stream is the global CPU generator forked (:func:`torch.random.fork_rng`) and seeded by
:func:`stream_seed`: the result depends on ``pair_seed`` only, and building consumes nothing of
the global stream (what the DataLoader's default seed comes from), so it is the same after
building either member of a pair. Networks are built on the CPU (CUDA draws are not forked).

When a checkpoint is imported (:func:`dna_video.checkpoints.load_pretrained` with
``pair_seed``), the tensors it does not provide are drawn the same way: a fresh module (the head)
from the stream ``fresh <module>``, shared by the pair, and DnA's Q-/V- by the ``dna_init``
policy from the stream ``dna_init <module>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
import torch
from torch import nn

from dna_video.models.attention import attention_kinds, build_attention

__all__ = [
    "Pairing",
    "stream_seed",
    "seeded",
    "pair_stream",
    "parameter_pairing",
    "build_paired",
    "kind_pairing",
    "pairing_table",
]

#: The kind every other one is paired against.
BASELINE = "softmax"


@dataclass(frozen=True)
class Pairing:
    """Which tensors (state-dict names) a network shares with its softmax twin.

    Args:
        shared: same name and shape in both: copied from the twin.
        extra: only in the kind's network (or another shape there): its own initialisation,
            from the extras stream.
        twin_only: only in the softmax twin (e.g. ``qkv.bias`` for ``diff``, which has none).
    """

    shared: tuple[str, ...]
    extra: tuple[str, ...]
    twin_only: tuple[str, ...]

    def as_dict(self) -> dict[str, list[str]]:
        return {"shared": list(self.shared), "extra": list(self.extra), "twin_only": list(self.twin_only)}


def stream_seed(pair_seed: int, stream: str) -> int:
    """The seed of the random stream named ``stream`` (``shared``, ``extras``, ``fresh head``,
    ``dna_init blocks.0.attn``...) of ``pair_seed``: 63 bits of a SHA-256, the same on every
    machine and Python (no salted ``hash``)."""
    if isinstance(pair_seed, bool) or not isinstance(pair_seed, int):
        raise TypeError(f"pair_seed must be an integer, got {pair_seed!r}")
    digest = hashlib.sha256(f"dna-video pair_seed={pair_seed} stream={stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Inside: the global CPU generator starts at ``seed``; on exit its state is restored, as
    if nothing had been drawn."""
    with torch.random.fork_rng(devices=[]):
        # Not torch.manual_seed: it would also queue a seed for CUDA, outside the fork.
        torch.random.default_generator.manual_seed(seed)
        yield


def pair_stream(pair_seed: int | None, stream: str) -> AbstractContextManager[None]:
    """:func:`seeded` by the stream ``stream`` of ``pair_seed``; no change when it is None."""
    return nullcontext() if pair_seed is None else seeded(stream_seed(pair_seed, stream))


def _shapes(tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in tensors}


def _split(own: dict[str, tuple[int, ...]], twin: dict[str, tuple[int, ...]]) -> Pairing:
    shared = tuple(n for n in own if twin.get(n) == own[n])
    extra = tuple(n for n in own if twin.get(n) != own[n])
    return Pairing(shared, extra, tuple(n for n in twin if own.get(n) != twin[n]))


def parameter_pairing(net: nn.Module, twin: nn.Module) -> Pairing:
    """The tensors of ``net``'s state dict that ``twin`` has under the same name and shape
    (shared), those it has not (extra), and the twin's that ``net`` lacks."""
    return _split(_shapes(net.state_dict().items()), _shapes(twin.state_dict().items()))


def _on_cpu(net: nn.Module, what: str) -> None:
    devices = {t.device.type for t in net.state_dict().values()}
    if devices - {"cpu"}:
        raise ValueError(f"paired initialisation: {what} has tensors on {sorted(devices)}; build it on the CPU "
                         f"(the pair's random streams are the CPU generator's), then move it")


@torch.no_grad()
def build_paired(build: Callable[[], nn.Module], build_twin: Callable[[], nn.Module], pair_seed: int) -> nn.Module:
    """``build()`` with its initialisation paired to ``build_twin()`` (the softmax network of
    the same architecture) by ``pair_seed``: the shared tensors are the twin's, built from the
    stream ``shared``; the others are ``build()``'s own, built from the stream ``extras``.
    Neither build draws from (or advances) the global random stream."""
    with pair_stream(pair_seed, "extras"):
        net = build()
    with pair_stream(pair_seed, "shared"):
        twin = build_twin()
    _on_cpu(net, "the network")
    _on_cpu(twin, "its softmax twin")
    pairing = parameter_pairing(net, twin)
    own, theirs = net.state_dict(), twin.state_dict()
    for name in pairing.shared:
        own[name].copy_(theirs[name])
    return net


def kind_pairing(kind: str, dim: int = 16, num_heads: int = 2) -> Pairing:
    """The pairing of one attention module of ``kind`` with softmax attention's (names inside
    the module, e.g. ``qkv.weight``); every tensor outside the attention modules is shared."""
    def names(name: str) -> dict[str, tuple[int, ...]]:
        module = build_attention(name, dim, num_heads, layer_index=2, num_layers=3)
        return _shapes(module.state_dict().items())

    return _split(names(kind), names(BASELINE))


def pairing_table(kinds: Iterable[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """Kind -> its :func:`kind_pairing` as lists (``shared``, ``extra``, ``twin_only``), for
    every registered kind unless ``kinds``: what an experiment's documentation states."""
    return {kind: kind_pairing(kind).as_dict() for kind in (attention_kinds() if kinds is None else kinds)}
