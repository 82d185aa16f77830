"""``TimeSformerSpec`` (a task's ``model.network``) mirrors ``TimeSformer``'s arguments by hand: every
argument but those the data fixes has a field of a compatible type whose default is the
network's, or null with its docstring naming what null means (the preset's, or the network's
own default, checked against it), or the fine-tuning recipe's value, said so. A new argument of
``TimeSformer`` without its field, or a field whose default drifts, fails here."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

import pytest
import yaml

from dna_video.models.timesformer import PRESETS, TimeSformer, TimeSformerSpec

SPEC_FIELDS = {f.name: f for f in dataclasses.fields(TimeSformerSpec)}
SPEC_TYPES = typing.get_type_hints(TimeSformerSpec)
NET_TYPES = typing.get_type_hints(TimeSformer.__init__)
# The data's (TimeSformerSpec.build takes them beside the spec), and the spec's own.
DATA = [p for p in inspect.signature(TimeSformerSpec.build).parameters if p not in ("self", "pair_seed")]
ARGUMENTS = {name: p for name, p in inspect.signature(TimeSformer.__init__).parameters.items()
             if name != "self" and name not in DATA}


def _documented(field: str) -> str:
    """The field's text in the spec's Args (up to the next field)."""
    doc = inspect.getdoc(TimeSformerSpec)
    match = re.search(rf"^    {field}: (.*?)(?=^    \w+: |\Z)", doc, re.MULTILINE | re.DOTALL)
    assert match, f"TimeSformerSpec documents no {field}"
    return " ".join(match.group(1).split())


def test_the_data_fixes_classes_frames_and_size():
    assert DATA == ["num_classes", "num_frames", "img_size"]
    assert not set(DATA) & set(SPEC_FIELDS)


def _value(text: str):
    """A documented value as YAML reads it (``1e-6`` too, which YAML 1.1 leaves a string)."""
    value = yaml.safe_load(text)
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


@pytest.mark.parametrize("argument", list(ARGUMENTS))
def test_every_network_argument_has_its_field(argument):
    field = TimeSformerSpec.RENAMED.get(argument, argument)
    assert field in SPEC_FIELDS, f"TimeSformer({argument}=...) has no TimeSformerSpec field"
    default = SPEC_FIELDS[field].default
    net_default = ARGUMENTS[argument].default
    net_type, spec_type = NET_TYPES[argument], SPEC_TYPES[field]
    assert spec_type in (net_type, net_type | None), (argument, spec_type, net_type)
    text = _documented(field)
    if default is None and net_default is not None:
        null = re.search(r"\(null: ([^;)]+)", text)
        assert null, f"{field}: null, but its doc does not say what null means"
        if null.group(1) == "the preset's":
            assert all(argument in preset for preset in PRESETS.values()), argument
        else:
            assert _value(null.group(1)) == net_default, (field, null.group(1), net_default)
    elif default != net_default:
        assert f"{default} in the fine-tuning recipe" in text, (field, default, net_default)


@pytest.mark.parametrize("argument", list(ARGUMENTS))
def test_every_field_reaches_its_argument(argument):
    """A value given to the field is the network's argument (kwargs maps it, renames included)."""
    field = TimeSformerSpec.RENAMED.get(argument, argument)
    value = {bool: True, int: 7, float: 0.25, str: "x"}.get(type(ARGUMENTS[argument].default), {"k": 1})
    if argument == "grad_checkpointing_part":
        value = "attention"
    kwargs = TimeSformerSpec(**{field: value}).kwargs(num_classes=3, num_frames=2, img_size=16)
    assert kwargs[argument] == value
    assert set(kwargs) <= set(ARGUMENTS) | set(DATA)


def test_every_field_is_an_argument_or_the_specs_own():
    arguments = {TimeSformerSpec.RENAMED.get(a, a) for a in ARGUMENTS}
    assert set(SPEC_FIELDS) - arguments == set(TimeSformerSpec.OWN)
