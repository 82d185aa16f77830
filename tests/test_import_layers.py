"""The package's imports point down: every module sits in one layer of :data:`LAYERS`, and imports
only from its own layer or lower ones; no two modules import each other (directly or around a
loop); the networks know nothing of Lightning.

Read statically (``ast``), so every import counts: those inside functions, ``if`` blocks
(``if __name__ == "__main__":`` and ``if TYPE_CHECKING:`` included) and ``try`` blocks too.
A new module must be placed in the table (:func:`test_every_module_is_placed`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "dna_video"

# (layer name, module prefixes), lowest first: one layer per folder of the package, so that
# no two folders can import each other. A prefix is a dotted module path and covers the
# modules below it; the longest matching prefix wins.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundations", ["dna_video.common"]),
    ("networks", ["dna_video.models"]),
    ("data", ["dna_video.data"]),
    ("checkpoints", ["dna_video.checkpoints"]),
    # What a run left behind (folders, runs.jsonl, summary.json, model card): plain files, no
    # torch at import (test_the_runs_room_imports_neither_torch_nor_lightning).
    ("runs", ["dna_video.runs"]),
    # A trained model written for others: ONNX, pt2, int8, Hugging Face, the reference's .pyth.
    ("export", ["dna_video.export"]),
    ("tasks", ["dna_video.tasks"]),
    # The study of models: maps, subspaces, denoising measures, evaluation reports, figures.
    ("analysis", ["dna_video.analysis"]),
    # A model on videos, long videos and live sources: one pipeline, a checkpoint's network or an
    # exported model on ONNX Runtime (without torch) behind one protocol.
    ("prediction", ["dna_video.prediction"]),
    ("command line", ["dna_video.training"]),
    ("tools", ["dna_video.tools", "dna_video.__main__"]),
]
# The layers that hold networks and data: no Lightning there but the DataModules.
NETWORK_LAYERS = ("networks", "data")
# Outside the layers, as importer and as target: the package root (it may re-export, lazily),
# and the data packages (class lists and splits, example configs).
EXEMPT = {"dna_video", "dna_video.resources", "dna_video.resources.configs"}

LIGHTNING = {"lightning", "pytorch_lightning"}
# Layer 0 imports no Lightning, except these: DataModules are Lightning by definition.
LIGHTNING_ALLOWED = {
    "dna_video.data.datamodule",  # VideoDataModule, ProtocolDataModule
    "dna_video.data.images",  # ImageFolderDataModule
}

ROOT = Path(__file__).resolve().parents[1] / PACKAGE


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # a module of the package, or a top-level name outside it
    file: str
    line: int
    at_import: bool = True  # run when the importer is imported (not inside a function or `if TYPE_CHECKING:`)


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (a package by its __init__)."""
    mods = {}
    for f in sorted(ROOT.rglob("*.py")):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = f
    return mods


def _imports(mods: dict[str, Path]) -> list[Import]:
    def known(name: str) -> str:
        while name not in mods:  # `import dna_video.checkpoints.io.x`: the deepest module named
            name = name.rpartition(".")[0]
        return name

    out = []
    for module, f in mods.items():
        package = module.split(".") if f.name == "__init__.py" else module.split(".")[:-1]
        rel = f.relative_to(ROOT.parent).as_posix()
        tree = ast.parse(f.read_text(), str(f))
        deferred = {id(inner) for outer in ast.walk(tree) for part in _deferred_parts(outer) for inner in ast.walk(part)}
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                # `from pkg import name`: the module pkg.name when there is one, else pkg.
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for name in names:
                if name == PACKAGE or name.startswith(PACKAGE + "."):
                    target = known(name)
                else:
                    target = name.partition(".")[0]
                out.append(Import(module, target, rel, node.lineno, id(node) not in deferred))
    return list(dict.fromkeys(out))  # `from pkg import a, b`: one import of pkg


def _deferred_parts(node: ast.AST) -> list[ast.AST]:
    """The parts of ``node`` that do not run when its module is imported: a function's body,
    an ``if TYPE_CHECKING:`` block's body (not its ``else``)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return list(node.body)
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return list(node.body)
    return []


def _layer(module: str) -> int | None:
    best, rank = "", None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > len(best):
                best, rank = p, i
    return rank


def _inside(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def _is_ancestor(package: str, module: str) -> bool:
    return module.startswith(package + ".")


MODULES = _modules()
IMPORTS = _imports(MODULES)


def test_every_module_is_placed():
    unplaced = [m for m in MODULES if m not in EXEMPT and _layer(m) is None]
    assert not unplaced, "modules in no layer of LAYERS (place each in the table): " + ", ".join(unplaced)


def _folders() -> list[str]:
    """Every folder of the package that holds Python modules, as a dotted name."""
    return sorted(f"{PACKAGE}.{d.name}" for d in ROOT.iterdir() if d.is_dir() and any(d.rglob("*.py")))


def test_every_folder_is_a_layer_of_its_own():
    """Each folder of the package is named in LAYERS, alone in its layer: imports between two
    folders can then only point one way."""
    named = [prefix for _, prefixes in LAYERS for prefix in prefixes]
    missing = [f for f in _folders() if f not in named and f not in EXEMPT]
    assert not missing, "folders in no layer of LAYERS: " + ", ".join(missing)
    shared = [name for name, prefixes in LAYERS if sum(p in _folders() for p in prefixes) > 1]
    assert not shared, "layers holding several folders: " + ", ".join(shared)
    gone = [p for p in named if p != f"{PACKAGE}.__main__" and p not in MODULES]
    assert not gone, "LAYERS names folders that are not in the package: " + ", ".join(gone)


def test_no_two_folders_import_each_other():
    """Folder by folder (any module of one importing any module of the other), no pair imports
    both ways."""
    edges: dict[tuple[str, str], str] = {}
    for imp in IMPORTS:
        if not _inside(imp.target) or imp.importer.count(".") < 1 or imp.target.count(".") < 1:
            continue
        pair = (imp.importer.split(".")[1], imp.target.split(".")[1])
        if pair[0] != pair[1]:
            edges.setdefault(pair, f"{imp.file}:{imp.line}")
    both = sorted({tuple(sorted(p)) for p in edges if (p[1], p[0]) in edges})
    assert not both, "folders importing each other: " + "; ".join(
        f"{a} <-> {b} ({edges[(a, b)]}, {edges[(b, a)]})" for a, b in both)


def test_contributing_lists_every_folder():
    """CONTRIBUTING.md's table of folders names each folder of the package."""
    text = (ROOT.parent / "CONTRIBUTING.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `dna_video/")]
    # Every folder, code or not (resources/ holds data only).
    folders = sorted(d.name for d in ROOT.iterdir() if d.is_dir() and d.name != "__pycache__")
    missing = [f for f in folders if not any(f"`{PACKAGE}/{f}/`" in r for r in rows)]
    assert not missing, "folders missing from CONTRIBUTING.md's table: " + ", ".join(missing)


def test_imports_point_down():
    bad = []
    for imp in IMPORTS:
        if not _inside(imp.target) or imp.importer in EXEMPT or imp.target in EXEMPT:
            continue
        low, high = _layer(imp.importer), _layer(imp.target)
        if low is not None and high is not None and high > low:
            bad.append(
                f"{imp.importer} ({LAYERS[low][0]}) -> {imp.target} ({LAYERS[high][0]}) at {imp.file}:{imp.line}"
            )
    assert not bad, "imports up the layers:\n" + "\n".join(bad)


def test_no_import_cycles():
    # A submodule importing its own package (a sibling through the package's re-exports) is
    # not a cycle: edges into an ancestor package are left out.
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        if _inside(imp.target) and imp.target != imp.importer and not _is_ancestor(imp.target, imp.importer):
            edges[imp.importer].add(imp.target)
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in MODULES:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    def where(component: list[str]) -> str:
        inside = set(component)
        return "; ".join(
            f"{i.importer} -> {i.target} at {i.file}:{i.line}"
            for i in IMPORTS if i.importer in inside and i.target in inside and i.target != i.importer
            and not _is_ancestor(i.target, i.importer)
        )

    assert not cycles, "import cycles:\n" + "\n".join(f"{' <-> '.join(c)} ({where(c)})" for c in cycles)


def test_networks_import_no_lightning():
    bad = [
        f"{i.importer} imports {i.target} at {i.file}:{i.line}"
        for i in IMPORTS
        if i.target in LIGHTNING and _layer(i.importer) is not None
        and LAYERS[_layer(i.importer)][0] in NETWORK_LAYERS and i.importer not in LIGHTNING_ALLOWED
    ]
    assert not bad, "Lightning in the networks or data:\n" + "\n".join(bad)


def test_rendering_and_writing_a_scene_import_neither_torch_nor_lightning():
    """A process that only renders and encodes synthetic videos (a dataset writer, the encoding
    test's processes) starts in a fraction of a second: no torch, no Lightning, in a real import."""
    probe = ("import sys, dna_video.data.scenes, dna_video.data.video; "
             "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


# What `dna-video predict CKPT ...` imports when it starts, and when it runs a timeline, a
# stream or an annotated video (the tool imports these modules in the functions that do).
PREDICT = ["dna_video.tools.predict", "dna_video.prediction.torch_backend", "dna_video.prediction.onnx_backend",
           "dna_video.prediction.timeline", "dna_video.prediction.stream", "dna_video.prediction.annotate"]


def _import_path(roots: list[str], wanted: set[str]) -> list[str] | None:
    """The chain of imports by which importing ``roots`` loads a module of ``wanted`` (None:
    none does): module-level imports followed through the package, each module's parent
    packages included (Python runs a package's ``__init__`` before its submodules)."""
    edges: dict[str, list[str]] = {}
    for imp in IMPORTS:
        if imp.at_import:
            edges.setdefault(imp.importer, []).append(imp.target)
    came_from: dict[str, str | None] = dict.fromkeys(roots)
    todo = list(roots)
    while todo:
        module = todo.pop(0)
        if module in wanted:
            chain = [module]
            while came_from[chain[-1]] is not None:
                chain.append(came_from[chain[-1]])
            return chain[::-1]
        if not _inside(module):
            continue
        parent = module.rpartition(".")[0]
        for target in edges.get(module, []) + ([parent] if parent else []):
            if target not in came_from:
                came_from[target] = module
                todo.append(target)
    return None


def test_predict_starts_without_lightning():
    """``predict`` on a checkpoint runs a TimeSformer, not a Lightning run: nothing it imports
    imports Lightning, which would add a third to its start-up (4 of 12 s on a 2-core CPU).
    Read statically, so it covers the package's own imports, not what a library imports."""
    chain = _import_path(PREDICT, LIGHTNING)
    assert chain is None, "predict imports Lightning: " + " -> ".join(chain)
    # The check sees a chain where there is one (the training command's).
    assert _import_path(["dna_video.training.cli"], LIGHTNING)[0] == "dna_video.training.cli"


def test_the_predict_command_starts_without_torch_or_matplotlib():
    """``dna-video predict`` starts light: its command module (and the pipeline's modules it
    imports) import no torch (only a checkpoint's backend does, when one is loaded), no
    matplotlib (only a timeline's PNG does, when written) and no Lightning."""
    heavy = {"torch", "torchvision", "einops", "timm", "matplotlib", "onnxruntime"} | LIGHTNING
    chain = _import_path(["dna_video.__main__", "dna_video.tools.predict", "dna_video.prediction.onnx_backend"], heavy)
    assert chain is None, "predict imports at start: " + " -> ".join(chain)
    # The check sees a chain where there is one (a checkpoint's backend imports torch).
    assert _import_path(["dna_video.prediction.torch_backend"], heavy)[-1] in heavy


def test_the_runs_room_imports_neither_torch_nor_lightning():
    """What a run left behind is plain files: importing any module of ``dna_video.runs`` (and
    the packages above it) loads no torch or Lightning, read statically; a model card imports
    torch inside the functions that build the network. ``tests/test_runs_room.py`` runs it
    where importing torch fails."""
    room = [m for m in MODULES if m == "dna_video.runs" or m.startswith("dna_video.runs.")]
    assert len(room) >= 5, room
    chain = _import_path(room, {"torch", "torchvision", "lightning", "pytorch_lightning"})
    assert chain is None, "dna_video.runs imports torch or Lightning: " + " -> ".join(chain)
