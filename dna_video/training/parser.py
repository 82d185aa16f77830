"""Configuration errors as one line, the closest valid key first, and where each option came from.

jsonargparse answers a mistyped key with the whole usage (about 70 lines) and, inside
``model:`` or ``data:``, with a dump of the Union it tried. :class:`DnAParser` prints instead
``error: <the key> is not an option of <what>; did you mean <closest>?`` and a pointer to
``--help``. :func:`option_sources` tells, for each model and data option a command sets, the
config file or the command line that set it (for messages that ask the user to drop one).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any, NoReturn

import yaml
from lightning.pytorch.cli import LightningArgumentParser

__all__ = ["DnAParser", "explain_config_error", "is_config_dump", "option_sources"]

COMMAND_LINE = "the command line"


def _import(class_path: str) -> type | None:
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None


def init_arguments(cls: type) -> dict[str, inspect.Parameter]:
    """The constructor arguments of ``cls``, those its ``**kwargs`` pass on to its bases too."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        parameters = inspect.signature(init).parameters
        for name, parameter in parameters.items():
            if name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                found.setdefault(name, parameter)
        if not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
            break  # the bases' arguments are not reachable from here
    return found


def _group_fields(cls: type, group: str) -> list[str]:
    """The fields of the grouped option ``group`` of ``cls`` (a dataclass argument)."""
    parameter = init_arguments(cls).get(group)
    if parameter is None:
        return []
    try:
        annotation = typing.get_type_hints(cls.__init__).get(group, parameter.annotation)
    except Exception:  # unresolvable annotations: no suggestion rather than a crash
        annotation = parameter.annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if dataclasses.is_dataclass(candidate):
            return [f.name for f in dataclasses.fields(candidate)]
    return []


def _closest(word: str, candidates: list[str], prefix: str = "") -> str:
    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean {prefix}{match[0]}?" if match else ""


def _parser_keys(parser: Any) -> list[str]:
    return sorted({a.dest for a in parser._actions if a.dest and a.dest not in ("help", "config")})


def explain_config_error(message: str, parser: Any = None) -> str:
    """jsonargparse's error ``message`` as one line: the offending key and its closest valid
    key; other errors by their innermost reason."""
    unknown = re.search(r"does not accept option '([^']+)'", message)
    problem = re.search(r"Problem with given class_path '([^']+)':\s*\n\s*(.+)", message)
    section = re.search(r'Parser key "([\w.]+)"', message)
    if problem:
        class_path, reason = problem.group(1), problem.group(2).strip()
        cls = _import(class_path)
        where = section.group(1) if section else "the config"
        if where == "data":  # DataModule options are always written under init_args
            where = "data.init_args"
        name = class_path.rsplit(".", 1)[-1]
        option = re.fullmatch(r"Option '([^']+)' is not accepted", reason)
        grouped = re.fullmatch(r"Group '([^']+)' does not accept option '([^']+)'", reason)
        if option and cls is not None:
            key = option.group(1)
            return f"{where}.{key} is not an option of {name}{_closest(key, list(init_arguments(cls)), f'{where}.')}"
        if grouped and cls is not None:
            group, key = grouped.groups()
            suggestion = _closest(key, _group_fields(cls, group), f"{where}.{group}.")
            return f"{where}.{group}.{key} is not an option of {name}'s {group}{suggestion}"
        return f"{where} ({name}): {reason}"
    if unknown:
        key = unknown.group(1)
        candidates = _parser_keys(parser) if parser is not None else []
        return f"{key} is not an option{_closest(key, candidates)}"
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return message
    # A Union's dump: the reasons of its members, without the `null` every optional admits.
    reasons = [re.sub(r"Expected a <class '(\w+)'>", r"expected \1", line[2:]) for line in lines
               if line.startswith("- ") and line != "- Expected a <class 'NoneType'>"]
    given = re.search(r"^\s*Given value: (.{1,80})$", message, re.MULTILINE)
    if not reasons:
        return " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
    head = f"{section.group(1)}: " if section else ""
    return head + "; ".join(reasons) + (f" (given {given.group(1)})" if given else "")


def is_config_dump(message: str) -> bool:
    """A jsonargparse message that :func:`explain_config_error` shortens."""
    return "Does not validate against any of the Union subtypes" in message


class DnAParser(LightningArgumentParser):
    """LightningCLI's parser, with errors as one line (:func:`explain_config_error`).
    ``JSONARGPARSE_DEBUG=1`` keeps jsonargparse's full message and traceback."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "")
        sys.stderr.write(f"error: {explain_config_error(message, parser)}\n({prog} --help lists the options)\n")
        self.exit(2)


def _flatten(section: Any, prefix: str) -> dict[str, Any]:
    """A config section as dotted keys, ``class_path`` / ``init_args`` levels left out."""
    if not isinstance(section, dict):
        return {}
    if "init_args" in section or "class_path" in section:
        section = section.get("init_args") or {}
    out = {}
    for key, value in section.items():
        if isinstance(value, dict) and "class_path" not in value:
            out.update(_flatten(value, f"{prefix}.{key}"))
        out[f"{prefix}.{key}"] = value
    return out


def option_sources(args: list[str]) -> dict[str, str]:
    """Where each ``model.*`` and ``data.*`` option of a command line was set: the last config
    file (``--config``) or ``the command line``, as jsonargparse applies them in order. Keys
    are dotted without ``init_args`` (``model.network.attention``, ``data.num_frames``)."""
    sources: dict[str, str] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        value = None
        if arg in ("--config", "-c") and position + 1 < len(args):
            value, position = args[position + 1], position + 1
        elif arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                loaded = yaml.safe_load(Path(value).read_text()) or {}
            except (OSError, yaml.YAMLError):
                loaded = {}
            for section in ("model", "data"):
                for key in _flatten(loaded.get(section), section):
                    sources[key] = value
        elif arg.startswith(("--model.", "--data.")):
            key = arg[2:].split("=", 1)[0].replace(".init_args.", ".")
            sources[key] = COMMAND_LINE
        position += 1
    return sources
