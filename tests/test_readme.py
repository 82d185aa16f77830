"""The README as a user's document: short enough to read, its first commands the ones CI runs,
its command table naming only commands that exist, and no option name that 0.2 renamed.

Fast (no training): the tools are imported only to ask their parsers about subcommands."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
from pathlib import Path

import pytest

from dna_video.__main__ import TOOLS
from dna_video.checkpoints.upgrade import RENAMED_OPTIONS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))

MAX_BYTES = 25 * 1024
LIGHTNING_SUBCOMMANDS = {"fit", "validate", "test", "predict"}
SUBCOMMANDS = LIGHTNING_SUBCOMMANDS | set(TOOLS) | {"configs"}


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section, up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


def test_readme_is_at_most_25_kib():
    size = README.stat().st_size
    assert size <= MAX_BYTES, f"README.md is {size} bytes, over {MAX_BYTES}: move detail into docs/"


def test_readme_starts_with_two_commands_and_ci_runs_the_second():
    text = _text()
    opening = re.match(r"# [^\n]+\n\n```bash\n([^\n]+)\n```\n\n```bash\n([^\n]+)\n```\n\n(?!```)", text)
    assert opening, "README must open with its title, then exactly two fenced one-line bash commands"
    quickstart, tests = opening.groups()
    assert "cli.py fit --config configs/quickstart.yaml" in quickstart
    assert "pytest" in tests

    # .ci/run: the same steps as the README's test command, plus the linter between them.
    ci_steps = []
    for line in (REPO / ".ci" / "run").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "set ", "cd ")):
            continue
        ci_steps += [step.strip() for step in line.split("&&")]
    ci_steps = [step for step in ci_steps if not step.startswith(".venv/bin/ruff")]
    assert [step.strip() for step in tests.split("&&")] == ci_steps


def _table_commands() -> list[list[str]]:
    """The words of each command in the first column of the Commands table (after the program)."""
    commands = []
    rows = [row for row in _section(_text(), "Commands").splitlines() if row.startswith("| ")]
    # The header's first cell may name the program (`.venv/bin/python cli.py` ...): the cells
    # below are then its words after it.
    program = rows[0].split("|")[1] if rows else ""
    program_words = ([".venv/bin/python", "cli.py"] if "`.venv/bin/python cli.py`" in program else None)
    for row in rows[1:]:
        if not row.startswith("| `"):
            continue
        cell = row.split("|")[1]
        for code in re.findall(r"`([^`]+)`", cell):
            words = code.split()
            if words[:2] in (["python", "cli.py"], [".venv/bin/python", "cli.py"]):
                commands.append(words[2:])
            elif words[:1] in (["dna-video"], [".venv/bin/dna-video"]):
                commands.append(words[1:])
            elif program_words:
                commands.append(words)
    return commands


def test_commands_table_names_every_subcommand_and_only_existing_ones():
    commands = _table_commands()
    assert commands, "the Commands table lists no `python cli.py ...` / `dna-video ...` command"
    named = {words[0] for words in commands if words}
    assert named <= SUBCOMMANDS, f"not subcommands of the one command: {sorted(named - SUBCOMMANDS)}"
    assert named == SUBCOMMANDS, f"missing from the Commands table: {sorted(SUBCOMMANDS - named)}"
    # predict both ways: over a config (LightningCLI) and over files (the tool).
    predicts = [words for words in commands if words[0] == "predict"]
    assert any(w[1:2] == ["--config"] for w in predicts) and any(w[1:2] and not w[1].startswith("-") for w in predicts)


@pytest.mark.parametrize("tool", ["analyze", "checkpoints", "export"])
def test_commands_table_names_existing_tool_subcommands(tool):
    """``analyze maps``, ``export reference``...: each second word is one the tool's own
    parser takes (its ``--help`` exits 0; an unknown choice exits 2)."""
    subs = {words[1] for words in _table_commands() if words[0] == tool and len(words) > 1}
    assert subs, f"the Commands table names no `{tool}` subcommand"
    main = importlib.import_module(TOOLS[tool]).main
    for sub in sorted(subs):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            with pytest.raises(SystemExit) as done:
                main([sub, "--help"])
        assert done.value.code == 0, f"`{tool} {sub}` is not a subcommand of {TOOLS[tool]}"


# ``--model.X`` on a command line, or ``model.X`` named in prose, with X a 0.1 option of the
# video / probe task. No exclusions are needed: the image task's own (flat, 0.1-named) options
# are written ``--model.init_args.X`` in docs/variants.md, which this does not match.
_OPTION = re.compile(r"(?<![\w.])(?:--)?model\.(\w+)")


def test_readme_and_docs_use_0_2_option_names():
    old = []
    for path in [README, *DOCS]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _OPTION.finditer(line):
                if match.group(1) in RENAMED_OPTIONS:
                    new = RENAMED_OPTIONS[match.group(1)]
                    old.append(f"{path.relative_to(REPO)}:{number}: {match.group(0)} (now: model.{new})")
    assert not old, "old option names:\n" + "\n".join(old)


# The documents a user reads after the README's first command (the CHANGELOG is history).
USER_DOCS = [README, *DOCS, REPO / "CONTRIBUTING.md", REPO / "benchmarks" / "README.md"]
_PIP = re.compile(r"\bpip3? (?:install|wheel|download|uninstall)\b")


def test_every_pip_command_installs_into_the_readme_environment():
    """The README's first command makes ``.venv`` and installs with ``.venv/bin/pip``; every
    ``pip`` command after it in the README and the docs does the same (``.venv/bin/pip`` or
    ``.venv/bin/python -m pip``): a bare ``pip`` without an activated environment installs
    into whichever Python comes first on the PATH."""
    first = re.match(r"# [^\n]+\n\n```bash\n([^\n]+)\n```", _text()).group(1)
    assert "python3.11 -m venv .venv && .venv/bin/pip install" in first
    bare = []
    for path in USER_DOCS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _PIP.finditer(line):
                before = line[: match.start()]
                if not (before.endswith(".venv/bin/") or re.search(r"\.venv/bin/python[\d.]* -m $", before)):
                    bare.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not bare, "pip commands outside the README's .venv (write .venv/bin/pip):\n" + "\n".join(bare)


# A command that runs Python: the README's environment's interpreter (the first command makes
# .venv), never a bare ``python``, which without an activated environment is another Python
# (or none). ``python3.11 -m venv .venv`` makes the environment; a ```python fence is no command.
_BARE_PYTHON = re.compile(r"(?<![\w./-])python3?(?:\.\d+)?(?= |$)")


def test_no_command_in_the_readme_or_docs_runs_a_bare_python():
    """(review finding 6) Every ``python ...`` a user may copy from the README, the docs,
    CONTRIBUTING.md or benchmarks/README.md (a code block's line, an inline command) is
    ``.venv/bin/python ...``, as the README's first command."""
    bare = []
    for path in USER_DOCS:
        name = str(path.relative_to(REPO))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                continue
            for match in _BARE_PYTHON.finditer(line):
                if not line[match.end():].startswith(" -m venv .venv"):
                    bare.append(f"{name}:{number}: {line.strip()}")
    assert not bare, "bare python commands (write .venv/bin/python):\n" + "\n".join(bare)


def test_no_message_of_the_package_tells_a_bare_pip_to_install():
    """(review of issue 39 point 9) An error saying what to install names this Python's pip
    (``dna_video.common.install``), as the README's commands name ``.venv/bin/pip``: a bare
    ``pip`` may install into another Python. Docstrings aside."""
    import ast

    bare = []
    for path in sorted((REPO / "dna_video").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        bare += [f"{path.relative_to(REPO)}:{node.lineno}" for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                 and re.search(r"(?<![\w/.-])pip install", node.value)]
    assert not bare, "a bare pip in a message (use dna_video.common.install):\n" + "\n".join(bare)
