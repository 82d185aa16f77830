"""Each default is stated once: the default clip length (8 frames), input side (224 pixels) and
attention kind (``"dna"``) are written only by their owner, and every other default reads the
owner's constant. Read statically (``ast``): a function argument's default, a dataclass field, a
keyword argument, a ``.get(key, default)`` or ``getattr(x, name, default)`` fallback, a dict
entry or an option's ``default=`` whose name speaks of frames (resp. size, attention) and whose
value is the literal, also as an operand of ``or`` / ``and`` or of ``a if c else b``, fails here."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from dna_video.common.defaults import IMG_SIZE, NUM_FRAMES
from dna_video.models.attention import DEFAULT_ATTENTION, attention_kinds

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "dna_video"

# constant -> (its owner, what a name must contain (one of) to be about it, the literal)
DEFAULTS = {
    "NUM_FRAMES": ("dna_video/common/defaults.py", ("frames", "clip_len"), 8),
    "IMG_SIZE": ("dna_video/common/defaults.py", ("img_size", "crop_size", "image_size", "side"), 224),
    "DEFAULT_ATTENTION": ("dna_video/models/attention/registry.py", ("attention", "kind"), "dna"),
}
# Where a literal may stay for now (path relative to the repository, constant); none today.
PENDING: set[tuple[str, str]] = set()


def _module_and_class_assignments(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    bodies = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    for body in bodies:
        for node in body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        yield target.id, node.value


def default_sites(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) of every place the code gives a name a default or a value by keyword; a
    value that is ``a or b`` or ``a if c else b`` gives each operand."""
    for name, value in _named_values(tree):
        stack = [value]
        while stack:
            value = stack.pop()
            if isinstance(value, ast.BoolOp):
                stack += value.values
            elif isinstance(value, ast.IfExp):
                stack += [value.body, value.orelse]
            else:
                yield name, value


def _named_values(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    yield from _module_and_class_assignments(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            yield from ((a.arg, d) for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults))
            yield from ((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            yield node.target.id, node.value
        elif isinstance(node, ast.Call):
            strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for keyword in node.keywords:
                if keyword.arg == "default":  # add_argument("--frames", default=...)
                    yield from ((s, keyword.value) for s in strings)
                elif keyword.arg:
                    yield keyword.arg, keyword.value
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault") \
                    and len(node.args) == 2 and strings:
                yield strings[0], node.args[1]
            if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) == 3 and strings:
                yield strings[0], node.args[2]
        elif isinstance(node, ast.Dict):  # {"num_frames": 8}
            yield from ((k.value, v) for k, v in zip(node.keys, node.values)
                        if isinstance(k, ast.Constant) and isinstance(k.value, str))


def restatements(path: Path) -> Iterator[tuple[str, int, str]]:
    """(constant, line, source) of each default in ``path`` that writes a constant's literal."""
    text = path.read_text()
    for name, value in default_sites(ast.parse(text, str(path))):
        for constant, (_, about, literal) in DEFAULTS.items():
            if (any(word in name.lower() for word in about) and isinstance(value, ast.Constant) and type(value.value) is type(literal)
                    and value.value == literal):
                yield constant, value.lineno, text.splitlines()[value.lineno - 1].strip()


def test_the_owners_state_the_values():
    assert NUM_FRAMES == 8 and IMG_SIZE == 224 and DEFAULT_ATTENTION == "dna"
    assert DEFAULT_ATTENTION in attention_kinds()


def test_each_default_is_written_by_its_owner_only():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for constant, line, source in restatements(path):
            if rel != DEFAULTS[constant][0] and (rel, constant) not in PENDING:
                found.append(f"{rel}:{line}: {source} (read {constant} instead)")
    assert not found, "defaults written again:\n" + "\n".join(found)
    for rel, constant in PENDING:  # an entry that no longer matches is stale: remove it
        path = REPO / rel
        assert path.is_file() and constant in {c for c, _, _ in restatements(path)}, (rel, constant)


@pytest.mark.parametrize("line, constant", [
    ("def f(num_frames: int = 8): ...", "NUM_FRAMES"),
    ("class C:\n    num_frames: int = 8", "NUM_FRAMES"),
    ("x = settings.get('num_frames', 8)", "NUM_FRAMES"),
    ("build(frames=8)", "NUM_FRAMES"),
    ("parser.add_argument('--frames', type=int, default=8)", "NUM_FRAMES"),
    ("def f(*, attention: str = 'dna'): ...", "DEFAULT_ATTENTION"),
    ("class Options:\n    cross_attention: str = 'dna'", "DEFAULT_ATTENTION"),
    ("kind = network.get('attention', 'dna')", "DEFAULT_ATTENTION"),
    ("x = {'num_frames': 8}", "NUM_FRAMES"),
    ("num_frames = cfg.get('num_frames') or 8", "NUM_FRAMES"),
    ("n = getattr(cfg, 'num_frames', 8)", "NUM_FRAMES"),
    ("clip_len: int = 8", "NUM_FRAMES"),
    ("def f(kind: str = 'dna'): ...", "DEFAULT_ATTENTION"),
    ("attention = given if given else 'dna'", "DEFAULT_ATTENTION"),
    ("def f(img_size: int = 224): ...", "IMG_SIZE"),
    ("class Settings:\n    crop_size: int = 224", "IMG_SIZE"),
    ("side = hparams.get('img_size', 224)", "IMG_SIZE"),
])
def test_the_scan_finds_each_way_of_writing_a_default(tmp_path, line, constant):
    path = tmp_path / "planted.py"
    path.write_text(line + "\n")
    assert [c for c, _, _ in restatements(path)] == [constant]


def test_the_scan_leaves_other_eights_and_kind_names_alone(tmp_path):
    path = tmp_path / "fine.py"
    path.write_text("def f(batch_size: int = 8, attention: str = 'softmax'): ...\n"
                    "register(Kind('dna', object))\nwidth = 8\n")
    assert list(restatements(path)) == []


def test_the_video_tasks_take_at_most_12_arguments():
    """The bound on a task's constructor (grouped options keep it): ``pair_seed`` went into
    ``init`` when it would have been the 13th."""
    from dna_video.tasks import ProbeClassifierModule, VideoClassifier

    for task in (VideoClassifier, ProbeClassifierModule):
        arguments = [p for p in inspect.signature(task.__init__).parameters if p != "self"]
        assert len(arguments) <= 12, (task.__name__, arguments)
