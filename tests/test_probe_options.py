"""``ProbeOptions`` (the probe task's ``model.probe``) mirrors ``ProbeClassifier``'s arguments by
hand, as ``TimeSformerSpec`` mirrors ``TimeSformer``'s (tests/test_timesformer_spec.py): every
argument but the backbone, the class count and the head dropout (the network's) has a field of
the same default and choices, documented, and the task hands each field to its argument. A new
argument without its field, a default or a choice list that drifts, fails here (review finding 11)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

import pytest

from dna_video.models.attention.cross import NEG_INIT_POLICIES
from dna_video.models.probe import ProbeClassifier
from dna_video.tasks.probe import ProbeOptions

FIELDS = {f.name: f for f in dataclasses.fields(ProbeOptions)}
# Given by the task from elsewhere: the built backbone, the data's class count, model.network.head_dropout.
NOT_OPTIONS = {"self", "backbone", "num_classes", "head_dropout"}
ARGUMENTS = {name: p for name, p in inspect.signature(ProbeClassifier.__init__).parameters.items()
             if name not in NOT_OPTIONS}


def test_every_argument_has_its_field_and_no_field_is_extra():
    assert list(FIELDS) == list(ARGUMENTS)


@pytest.mark.parametrize("name", list(ARGUMENTS))
def test_each_field_has_the_arguments_default_choices_and_a_description(name):
    assert FIELDS[name].default == ARGUMENTS[name].default, name
    field_type = typing.get_type_hints(ProbeOptions)[name]
    argument_type = typing.get_type_hints(ProbeClassifier.__init__)[name]
    if typing.get_origin(field_type) is typing.Literal:
        choices = set(typing.get_args(field_type))
        if typing.get_origin(argument_type) is typing.Literal:
            assert choices == set(typing.get_args(argument_type)), name
        else:  # the network takes a str and checks it against its policies
            assert name == "neg_init" and choices == set(NEG_INIT_POLICIES), name
    else:
        assert field_type == argument_type, (name, field_type, argument_type)
    assert re.search(rf"^    {name}: \S", inspect.getdoc(ProbeOptions), re.MULTILINE), f"ProbeOptions documents no {name}"


def test_the_task_hands_each_field_to_its_argument(monkeypatch):
    """Every field with a value of its own reaches ProbeClassifier's argument of its name."""
    import torch

    from dna_video.models.timesformer import TimeSformerSpec
    from dna_video.tasks import probe as task

    given = {"num_probes": 3, "layers": [-1], "cross_attention": "softmax", "interaction": "residual",
             "init_from_backbone": False, "neg_init": "orthogonal", "neg_init_eps": 0.003, "alpha_init": 0.25}
    assert set(given) == set(FIELDS)
    received = {}

    class Recorder(torch.nn.Module):
        def __init__(self, backbone, num_classes, **kwargs):
            super().__init__()
            received.update(kwargs)
            self.backbone = backbone

    monkeypatch.setattr(task, "ProbeClassifier", Recorder)
    task.ProbeClassifierModule(num_classes=3, num_frames=2, img_size=16, probe=ProbeOptions(**given),
                               network=TimeSformerSpec(arch="tiny", depth=1))
    assert {k: received[k] for k in given} == given
