"""The package as a user installs it: ``pip install .`` (not editable) into a temporary
target, then used from outside the checkout; and the declared dependencies against what the
code imports."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Build outputs and generated data: not part of what pip builds from a clean checkout.
_GENERATED = shutil.ignore_patterns(
    ".git", ".venv", ".cache", ".pytest_cache", "__pycache__", "*.egg-info", "build", "dist", "runs",
    "lightning_logs", "mini",
)


def _NOT_SOURCES(folder: str, names: list[str]) -> set[str]:
    """What :data:`_GENERATED` matches, except the package's own ``dna_video/runs/`` (source code,
    not a folder of training runs)."""
    ignored = set(_GENERATED(folder, names))
    return ignored - {"runs"} if Path(folder).name == "dna_video" else ignored


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Path:
    """``pip install --no-deps --target`` of a copy of the checkout (so that a stale
    ``build/`` cannot add files, and the checkout gets none): the target folder."""
    work = tmp_path_factory.mktemp("install")
    source, target = work / "source", work / "target"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCES)
    # No network: the venv's setuptools builds it (no isolated build environment).
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--no-cache-dir", "--target", str(target), str(source)],
        capture_output=True, text=True, cwd=work,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def _class_lines(name: str) -> list[str]:
    return [line.strip() for line in (REPO / "data" / name).read_text().splitlines() if line.strip()]


# Run by the installed copy's Python, outside the checkout: the DataModules' protocols and
# splits, then the `dna-video` console script as a user runs it (in the same process: one
# start-up of torch and Lightning for both).
_OUTSIDE_SCRIPT = r"""
import contextlib, io, json, os, runpy, sys
from pathlib import Path
import dna_video
from dna_video.training.configs import packaged_configs
from dna_video.data import NTURGBD60, ToyotaSmarthome
from dna_video.data.protocols import DATA_DIR

root, console_script = Path(sys.argv[1]), sys.argv[2]
out = {"package": dna_video.__file__, "data_dir": str(DATA_DIR), "omp": os.environ.get("OMP_WAIT_POLICY"),
       "configs": {k: str(v) for k, v in packaged_configs().items()}}
for name, cls, protocol, folder in [("smarthome", ToyotaSmarthome, "cs", "smarthome"),
                                    ("smarthome_cv2", ToyotaSmarthome, "cv2", "smarthome"),
                                    ("ntu", NTURGBD60, "cs", "ntu")]:
    dm = cls(root=str(root / folder), protocol=protocol, num_workers=0)
    dm.setup("fit")
    dm.setup("test")
    out[name] = {
        "classes": dm.class_names,
        "splits": {k: sorted(v) for k, v in dm.protocol.splits.items()},
        "records": {split: [[Path(r.path).name, r.label] for r in dm.datasets[split].records]
                    for split in ("train", "val", "test") if split in dm.datasets},
    }
sys.argv = [console_script, "fit", "--config", "quickstart", "--print_config"]
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    try:
        runpy.run_path(console_script, run_name="__main__")
    except SystemExit as stop:
        out["exit"] = stop.code
out["print_config"] = printed.getvalue()
sys.argv = [console_script, "configs"]
listed = io.StringIO()
with contextlib.redirect_stdout(listed):
    try:
        runpy.run_path(console_script, run_name="__main__")
    except SystemExit as stop:
        out["configs_exit"] = stop.code
out["configs_listing"] = listed.getvalue()
print(json.dumps(out))
"""


@pytest.fixture(scope="session")
def outside(installed, tmp_path_factory) -> dict:
    """What :data:`_OUTSIDE_SCRIPT` found, run in a temporary folder with only the installed
    copy of dna_video importable (the venv's dependencies stay available)."""
    work = tmp_path_factory.mktemp("outside")
    # Setup only lists names and checks that files exist: empty files are enough.
    smarthome, ntu = work / "smarthome", work / "ntu"
    smarthome.mkdir()
    ntu.mkdir()
    for name in ["Walk_p03_r00_v00_c01.mp4", "Drink.Fromcup_p19_r00_v00_c05.mp4", "Cutbread_p02_r00_v00_c02.mp4",
                 "Pour.Fromcup_p10_r00_v00_c02.mp4"]:
        (smarthome / name).touch()
    for name in ["S001C001P001R001A001_rgb.avi", "S001C002P003R001A060_rgb.avi"]:
        (ntu / name).touch()
    script = installed / "bin" / "dna-video"
    assert script.is_file(), "pip installed no dna-video console script"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OMP_WAIT_POLICY")}
    env.update(PYTHONPATH=str(installed), JSONARGPARSE_DEPRECATION_WARNINGS="off")
    done = subprocess.run([sys.executable, "-c", _OUTSIDE_SCRIPT, str(work), str(script)],
                          capture_output=True, text=True, cwd=work, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_installed_copy_reads_class_lists_and_splits_from_anywhere(installed, outside):
    found = outside
    # The installed copy, and its own package data: nothing read from the checkout.
    assert Path(found["package"]).is_relative_to(installed), found["package"]
    assert Path(found["data_dir"]) == installed / "dna_video" / "resources"
    for name in ["toyota_smarthome_classes.txt", "toyota_smarthome_cv_classes.txt", "toyota_smarthome_splits.yaml",
                 "ntu60_classes.txt", "ntu60_splits.yaml"]:
        assert (installed / "dna_video" / "resources" / name).read_bytes() == (REPO / "data" / name).read_bytes()

    # Class lists and splits as the checkout's data/ states them.
    smarthome_spec = yaml.safe_load((REPO / "data" / "toyota_smarthome_splits.yaml").read_text())
    assert found["smarthome"]["classes"] == _class_lines("toyota_smarthome_classes.txt")
    assert found["smarthome_cv2"]["classes"] == _class_lines("toyota_smarthome_cv_classes.txt")
    assert found["smarthome"]["splits"] == {k: sorted(v) for k, v in smarthome_spec["protocols"]["cs"]["splits"].items()}
    assert found["ntu"]["classes"] == _class_lines("ntu60_classes.txt")
    assert len(found["ntu"]["classes"]) == 60

    # Subject 3 trains, 19 validates, 2 tests; Pour.Fromcup is outside the 31 classes.
    walk = found["smarthome"]["classes"].index("Walk")
    drink = found["smarthome"]["classes"].index("Drink.Fromcup")
    cut = found["smarthome"]["classes"].index("Cutbread")
    assert found["smarthome"]["records"] == {
        "train": [["Walk_p03_r00_v00_c01.mp4", walk]],
        "val": [["Drink.Fromcup_p19_r00_v00_c05.mp4", drink]],
        "test": [["Cutbread_p02_r00_v00_c02.mp4", cut]],
    }
    # NTU cross-subject: performer 1 trains, 3 tests; label = action - 1.
    assert found["ntu"]["records"]["train"] == [["S001C001P001R001A001_rgb.avi", 0]]
    assert found["ntu"]["records"]["test"] == [["S001C002P003R001A060_rgb.avi", 59]]

    # The example configs ship too, under their names, with any files they compose (sub-folders).
    shipped = {name: Path(path) for name, path in found["configs"].items()}
    assert set(shipped) == {p.stem for p in (REPO / "configs").glob("*.yaml")}
    for name, path in shipped.items():
        assert path == installed / "dna_video" / "resources" / "configs" / f"{name}.yaml"
    for source in (REPO / "configs").rglob("*.yaml"):
        copy = installed / "dna_video" / "resources" / "configs" / source.relative_to(REPO / "configs")
        assert copy.is_file() and copy.read_bytes() == source.read_bytes(), source

    # One test for both checks: under pytest-xdist two tests could build the install twice.
    _installed_command_runs_a_shipped_config_by_name(outside)


def _installed_command_runs_a_shipped_config_by_name(outside: dict) -> None:
    """The ``dna-video`` console script of the install, outside the checkout: ``--config
    quickstart`` is the shipped quickstart, parsed by LightningCLI into the full config."""
    assert outside["exit"] in (0, None)
    # Set by the package before torch loads (the console script imports it first).
    assert outside["omp"] == "PASSIVE"
    # `dna-video configs`: one line per shipped config, its name and installed path.
    listing = dict(line.split("\t") for line in outside["configs_listing"].splitlines())
    assert outside["configs_exit"] in (0, None) and listing == outside["configs"]
    config = yaml.safe_load(outside["print_config"])
    quickstart = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    assert config["data"]["class_path"] == quickstart["data"]["class_path"]
    assert config["trainer"]["max_epochs"] == quickstart["trainer"]["max_epochs"]
    network = config["model"]["init_args"]["network"]
    assert network["arch"] == quickstart["model"]["network"]["arch"]
    assert network["attention"] == "dna"  # a default of the model, not stated in the file


def test_config_names_resolve_to_shipped_files_and_unknown_names_fail_clearly(tmp_path, monkeypatch):
    from dna_video.training.configs import packaged_configs, resolve_config_names

    quickstart = str(packaged_configs()["quickstart"])
    assert Path(quickstart) == REPO / "configs" / "quickstart.yaml"  # a checkout: configs/ itself
    monkeypatch.chdir(tmp_path)
    assert resolve_config_names(["fit", "--config", "quickstart", "--trainer.max_epochs=1"]) == [
        "fit", "--config", quickstart, "--trainer.max_epochs=1"]
    assert resolve_config_names(["fit", "-c", "quickstart.yaml"]) == ["fit", "-c", quickstart]
    assert resolve_config_names(["fit", "--config=quickstart"]) == ["fit", f"--config={quickstart}"]
    # A file of that name in the working directory wins; inline YAML is left alone.
    (tmp_path / "quickstart").write_text("seed_everything: 1\n")
    assert resolve_config_names(["fit", "--config", "quickstart"]) == ["fit", "--config", "quickstart"]
    assert resolve_config_names(["fit", "--config", "{seed_everything: 1}"]) == ["fit", "--config", "{seed_everything: 1}"]
    with pytest.raises(SystemExit, match=r"--config quickstar: no such file.*quickstart"):
        resolve_config_names(["fit", "--config", "quickstar"])


# ----------------------------------------------------------------------------- dependencies


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_normalise(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in requirements}


def _third_party_imports(folder: Path, local: set[str]) -> dict[str, set[str]]:
    """Top-level module name -> files importing it, for the absolute imports of every
    ``.py`` file under ``folder`` that are neither the standard library nor ``local``."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def _distributions(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """Distribution (normalised name) -> files, through the venv's installed metadata."""
    owners = packages_distributions()
    out: dict[str, set[str]] = {}
    for module, files in modules.items():
        assert module in owners, f"{module} (imported by {sorted(files)}) is not installed from any distribution"
        for dist in owners[module]:
            out.setdefault(_normalise(dist), set()).update(files)
    return out


# Declared dependencies the package needs without importing them by name, and why.
NOT_IMPORTED = {
    "jsonargparse": "LightningCLI parses configs with it (lightning's own optional dependency)",
    "tensorboard": "the configs' TensorBoardLogger writes its event files with it",
}


# Extras the package imports only where they are used (the code says which extra to install).
PACKAGE_EXTRAS = {
    "deploy": "dna-video export onnx (dna_video.export)",
    "torchcodec": "the data option decoder=torchcodec (dna_video.data.decoders)",
}


@pytest.mark.slow
def test_every_package_import_is_a_declared_dependency_and_every_dependency_used():
    declared = _requirement_names(PYPROJECT["project"]["dependencies"])
    extras = PYPROJECT["project"]["optional-dependencies"]
    optional = set().union(*(_requirement_names(extras[name]) for name in PACKAGE_EXTRAS))
    imported = _distributions(_third_party_imports(REPO / "dna_video", {"dna_video"}))
    undeclared = {d: sorted(f) for d, f in imported.items() if d not in declared | optional}
    assert not undeclared, f"imported by dna_video but not in [project] dependencies or {sorted(PACKAGE_EXTRAS)}: {undeclared}"
    unused = declared - set(imported) - set(NOT_IMPORTED)
    assert not unused, f"declared dependencies that dna_video does not import: {sorted(unused)}"
    stale = {d for d in NOT_IMPORTED if d in imported}
    assert not stale, f"{sorted(stale)} are imported now: remove them from NOT_IMPORTED"
    assert set(NOT_IMPORTED) <= declared
    # pytorchvideo does real work in the package (class-folder splits), not only in benchmarks.
    assert "pytorchvideo" in imported


@pytest.mark.slow
def test_benchmarks_experiments_and_tests_import_only_declared_packages():
    declared = _requirement_names(PYPROJECT["project"]["dependencies"])
    extras = {k: _requirement_names(v) for k, v in PYPROJECT["project"]["optional-dependencies"].items()}
    # The checkout's own packages (dna_video, benchmarks, experiments...) and the tests' helpers.
    local = {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()}
    local |= {p.stem for p in REPO.glob("*.py")} | {p.stem for p in (REPO / "tests").glob("*.py")}
    assert {"dna_video", "benchmarks", "video_trees"} <= local
    for folder, extra in [("benchmarks", "bench"), ("experiments", None), ("tests", "dev")]:
        if not (REPO / folder).is_dir():
            continue
        allowed = declared | extras.get(extra, set())
        imported = _distributions(_third_party_imports(REPO / folder, local))
        undeclared = {d: sorted(f) for d, f in imported.items() if d not in allowed}
        assert not undeclared, f"imported by {folder}/ but neither a dependency nor in the {extra!r} extra: {undeclared}"
