"""Paired initialisation (issue 21, point 2): for every registered attention kind against
softmax, the tensors both networks have start equal, copied from the softmax network's own
initialisation at the pair's seed; the kind's extras come from their own stream of that seed;
nothing depends on the global random state; and the same holds when both members of a pair
are fine-tuned from one softmax checkpoint (fresh head, ``dna_init``)."""

import re

import pytest
import torch

from dna_video.checkpoints import PretrainedWeights, load_weights
from dna_video.models.attention import attention_kind, attention_kinds, init_negative_branch
from dna_video.models.init import init_module
from dna_video.models.pairing import kind_pairing, pairing_table, parameter_pairing, stream_seed
from dna_video.models.timesformer import TimeSformer, TimeSformerSpec

GEOMETRY = dict(num_classes=3, num_frames=2, img_size=16)
SPEC = dict(arch="tiny", embed_dim=16, depth=2, num_heads=2, patch_size=8)


def spec(kind: str) -> TimeSformerSpec:
    return TimeSformerSpec(attention=kind, **SPEC)


def build(kind: str, pair_seed: int | None, global_seed: int, draws: int = 0) -> TimeSformer:
    """The kind's network built with ``pair_seed`` after the global stream was seeded with
    ``global_seed`` and ``draws`` numbers were drawn from it (as other code would)."""
    torch.manual_seed(global_seed)
    torch.rand(draws)
    return spec(kind).build(**GEOMETRY, pair_seed=pair_seed)


def expected_extras(net: TimeSformer, kind: str) -> set[str]:
    """From the registry's facts, not from the pairing: the tensors of the kind's declared
    extras (``q_neg`` -> ``blocks.0.attn.q_neg.weight``, ...) in every attention module."""
    declared = set(attention_kind(kind).extras)
    return {key for key in net.state_dict()
            if (found := re.search(r"\.(?:temporal_)?attn\.([^.]+)", key)) and found.group(1) in declared}


def softmax_reference(pair_seed: int) -> dict[str, torch.Tensor]:
    """The softmax network's own initialisation written without the pairing code: the plain
    constructor with the global stream seeded by the pair's ``shared`` seed."""
    torch.manual_seed(stream_seed(pair_seed, "shared"))
    return TimeSformer(**{**spec("softmax").kwargs(**GEOMETRY)}).state_dict()


@pytest.mark.parametrize("kind", attention_kinds())
def test_every_kind_starts_paired_with_softmax(kind):
    reference = softmax_reference(3)
    softmax = build("softmax", 3, global_seed=0).state_dict()
    for key, value in reference.items():
        assert torch.equal(softmax[key], value), key

    first = build(kind, 3, global_seed=1, draws=17)
    # Building drew nothing from the global stream (the DataLoader's seed comes from it).
    after = torch.get_rng_state()
    torch.manual_seed(1)
    torch.rand(17)
    assert torch.equal(after, torch.get_rng_state())
    second = build(kind, 3, global_seed=2, draws=5)
    other_seed = build(kind, 4, global_seed=1, draws=17)

    pairing = parameter_pairing(first, TimeSformer(**spec("softmax").kwargs(**GEOMETRY)))
    assert set(pairing.extra) == expected_extras(first, kind)
    assert set(pairing.shared) | set(pairing.extra) == set(first.state_dict())
    a, b, c = first.state_dict(), second.state_dict(), other_seed.state_dict()
    for key in pairing.shared:
        assert torch.equal(a[key], reference[key]), key
        assert torch.equal(b[key], reference[key]), key
    # The seed matters: a random shared tensor differs at another pair_seed.
    assert not torch.equal(c["blocks.0.attn.qkv.weight"], a["blocks.0.attn.qkv.weight"])
    for key in pairing.extra:
        assert torch.equal(a[key], b[key]), key  # whatever the global stream did before
        constant = bool((a[key] == a[key].flatten()[0]).all())  # alpha_init, a norm's ones
        assert constant or not torch.equal(a[key], c[key]), key


def test_the_extras_are_drawn_from_their_own_stream():
    """The extras of DnA at a pair_seed are the DnA constructor's own draws from the stream
    ``extras`` (not the shared stream's continuation nor the global one)."""
    net = build("dna", 5, global_seed=0)
    torch.manual_seed(stream_seed(5, "extras"))
    plain = TimeSformer(**spec("dna").kwargs(**GEOMETRY)).state_dict()
    for key in expected_extras(net, "dna"):
        assert torch.equal(net.state_dict()[key], plain[key]), key
    assert stream_seed(5, "extras") != stream_seed(5, "shared") != stream_seed(6, "shared")


def test_without_pair_seed_the_global_stream_decides():
    a, b = build("dna", None, global_seed=0), build("dna", None, global_seed=0, draws=3)
    assert not torch.equal(a.blocks[0].attn.qkv.weight, b.blocks[0].attn.qkv.weight)


def test_the_pairing_table_lists_each_kinds_shared_and_extra_names():
    table = pairing_table()
    assert set(table) == set(attention_kinds())
    assert table["softmax"] == {"shared": ["proj.weight", "proj.bias", "qkv.weight", "qkv.bias"],
                                "extra": [], "twin_only": []}
    assert sorted(table["dna"]["extra"]) == ["neg_scalers", "q_neg.bias", "q_neg.weight", "v_neg.bias", "v_neg.weight"]
    assert sorted(table["diff"]["extra"]) == ["lambda_k1", "lambda_k2", "lambda_q1", "lambda_q2", "sub_norm.weight"]
    assert table["diff"]["twin_only"] == ["qkv.bias"] and table["cog"]["extra"] == []
    for kind in attention_kinds():
        pairing = kind_pairing(kind)
        # Only the declared extras are not shared (the registry's facts, per module).
        assert {name.split(".")[0] for name in pairing.extra} == set(attention_kind(kind).extras), kind


# -- fine-tuning both members of a pair from one softmax checkpoint --------------------------------
@pytest.fixture(scope="session")
def softmax_checkpoint(tmp_path_factory):
    """A softmax checkpoint of another class count (the head is re-initialised on import),
    with weights no initialisation would give."""
    torch.manual_seed(0)
    source = TimeSformer(**{**spec("softmax").kwargs(**GEOMETRY), "num_classes": 7})
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path_factory.mktemp("pair") / "softmax.pth"
    torch.save(source.state_dict(), path)
    return path


def finetuned(kind, path, pair_seed, global_seed, draws=0, policy="random"):
    net = build(kind, pair_seed, global_seed, draws)
    torch.manual_seed(global_seed)
    torch.rand(draws)
    load_weights(net, PretrainedWeights(source=str(path), dna_init=policy, pair_seed=pair_seed))
    return net.state_dict()


@pytest.mark.parametrize("kind", attention_kinds())
def test_fine_tuned_pairs_start_equal(kind, softmax_checkpoint):
    softmax = finetuned("softmax", softmax_checkpoint, 3, global_seed=0)
    checkpoint = torch.load(softmax_checkpoint)
    # The fresh head is the pair's, from its own stream: the same module initialisation.
    head = torch.nn.Linear(16, 3)
    torch.manual_seed(stream_seed(3, "fresh head"))
    init_module(head)
    assert torch.equal(softmax["head.weight"], head.weight) and torch.equal(softmax["head.bias"], head.bias)
    assert not torch.equal(softmax["head.weight"], torch.zeros(3, 16))

    a = finetuned(kind, softmax_checkpoint, 3, global_seed=1, draws=11)
    b = finetuned(kind, softmax_checkpoint, 3, global_seed=2)
    c = finetuned(kind, softmax_checkpoint, 4, global_seed=1, draws=11)
    net = spec(kind).build(**GEOMETRY)
    extras = expected_extras(net, kind)
    for key in set(a) - extras:
        assert torch.equal(a[key], softmax[key]), key
        if key in checkpoint and not key.startswith("head."):
            assert torch.equal(a[key], checkpoint[key]), key
    for key in extras:
        assert torch.equal(a[key], b[key]), key
        constant = bool((a[key] == a[key].flatten()[0]).all())
        assert constant or not torch.equal(a[key], c[key]), key


@pytest.mark.parametrize("policy", ["random", "orthogonal"])
def test_dna_init_draws_come_from_the_pair_stream(policy, softmax_checkpoint):
    """Q-, V- of each module: the policy applied under that module's ``dna_init`` stream."""
    state = finetuned("dna", softmax_checkpoint, 3, global_seed=0, draws=9, policy=policy)
    net = spec("dna").build(**GEOMETRY)
    net.load_state_dict(state)
    for name in ("blocks.0.attn", "blocks.1.temporal_attn"):
        module = net.get_submodule(name)
        expected = {k: v.clone() for k, v in module.state_dict().items()}
        torch.manual_seed(stream_seed(3, f"dna_init {name}"))
        init_negative_branch(module, policy)
        for key in ("q_neg.weight", "v_neg.weight"):
            assert torch.equal(module.state_dict()[key], expected[key]), (name, key)


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--model.init.pair_seed", "--model.pair_seed"], ids=["init.pair_seed", "old name"])
def test_pair_seed_on_the_command_line(tmp_path, option, caplog):
    """``--model.init.pair_seed 3`` (``--model.pair_seed`` before 0.3, read as it with a warning)
    reaches the network: a DnA and a softmax model of the quickstart architecture share every
    tensor of the softmax one but the head (the class count is the same: the head too)."""
    from dna_video.training.cli import main

    def model(kind):
        return main(["--config", "configs/quickstart.yaml", f"--data.init_args.root={tmp_path / 'v'}",
                     "--trainer.logger=false", option, "3", "--model.network.depth=1",
                     f"--model.network.attention={kind}"], run=False).model

    caplog.set_level("WARNING", logger="dna_video")
    dna, softmax = model("dna"), model("softmax")
    assert dna.hparams.init["pair_seed"] == 3 and dna.init.pair_seed == 3
    assert ("--model.pair_seed -> --model.init.pair_seed" in caplog.text) == (option == "--model.pair_seed")
    dna_state, softmax_state = dna.net.state_dict(), softmax.net.state_dict()
    extras = expected_extras(dna.net, "dna")
    assert extras and set(softmax_state) == set(dna_state) - extras
    for key, value in softmax_state.items():
        assert torch.equal(dna_state[key], value), key


def test_a_non_integer_pair_seed_is_refused():
    with pytest.raises(TypeError, match="pair_seed must be an integer"):
        spec("dna").build(**GEOMETRY, pair_seed="3")


def test_load_into_still_loads_with_a_warning(softmax_checkpoint):
    """``PretrainedWeights(...).load_into(net, pair_seed=s)`` (before 0.3): the same weights as
    ``load_weights`` with ``pair_seed`` in the weights, and a DeprecationWarning."""
    net = build("dna", 3, global_seed=0)
    with pytest.warns(DeprecationWarning, match="load_weights"):
        PretrainedWeights(source=str(softmax_checkpoint), dna_init="random").load_into(net, pair_seed=3)
    expected = finetuned("dna", softmax_checkpoint, 3, global_seed=5)
    for key, value in net.state_dict().items():
        assert torch.equal(value, expected[key]), key
