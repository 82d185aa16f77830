"""Running one cell: its data roots, its ``cli.py fit`` command (one thread; in a grid, forked
from a process that imported the toolkit once, else a process of its own), and its measures on
the held-out test sets (:mod:`.measure`), written to ``cell.json`` beside the run with the
record of what produced it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from experiments.denoising.design import CONFIG, QUICK, REPO, Cell, data_options, test_set_options
from experiments.reproducible import ForkedCli, environment, single_thread_env, tree_state

__all__ = ["Layout", "fit_command", "run_cell", "render_data", "cell_record"]


class Layout:
    """Where an experiment's data and runs live under ``out``."""

    def __init__(self, out: Path, plan: dict, quick: bool, test_data: Path | None = None) -> None:
        self.out, self.plan, self.quick = out, plan, quick
        self.runs = out / "runs"
        self.data = out / "data"
        self.test_data = test_data  # the held-out sets' folder when not ``data`` (a second render's runs)

    def train_root(self, task: str) -> Path:
        return self.data / task

    def test_root(self, name: str) -> Path:
        return (self.test_data or self.data) / f"test_{name}"

    def set_args(self, name: str) -> dict:
        """SyntheticDistractors arguments whose test split is the held-out set ``name`` (or,
        for ``source``, the source root's own test split). A set with a seed of its own comes
        with a root of its own (its training videos are never used)."""
        if name == "source":
            return dict(data_options(self.plan, "source", self.quick), root=str(self.train_root("source")))
        options = test_set_options(self.plan, name, self.quick)
        root = self.train_root(name if name.startswith("calibrate") else "target")
        return dict(options, root=str(root), test_root=str(self.test_root(name)))

    def sets_of(self, cell: Cell) -> list[str]:
        """The held-out sets a cell is measured on."""
        if cell.task == "source":
            return ["source"]
        if cell.task.startswith("calibrate"):
            return [cell.task]
        return ["in_distribution", "shifted"]

    def epochs(self, cell: Cell) -> int:
        if self.quick:
            return QUICK["epochs"]
        kind = "pretrain" if cell.task == "source" else ("finetune" if cell.start is not None else "scratch")
        return int(self.plan["epochs"][kind])


def _option(value) -> str:
    return json.dumps(value) if isinstance(value, (list, dict, bool)) or value is None else str(value)


def fit_command(cell: Cell, layout: Layout) -> list[str]:
    """The ``cli.py fit`` command of ``cell`` (paths absolute; run from the code's checkout)."""
    folder = cell.folder(layout.runs)
    epochs = layout.epochs(cell)
    command = [
        sys.executable, "cli.py", "fit", "--config", str(CONFIG.relative_to(REPO)),
        "--data.init_args.root", str(layout.train_root(cell.task)),
        "--data.init_args.data_seed", str(cell.seed), "--data.init_args.cache_decoded", "true",
        "--model.network.attention", cell.variant, "--model.init.pair_seed", str(cell.seed),
        "--seed_everything", str(cell.seed),
        "--trainer.logger.init_args.save_dir", str(folder.parent.parent),
        "--trainer.logger.init_args.name", folder.parent.name, "--trainer.logger.init_args.version", "0",
        "--trainer.max_epochs", str(epochs), "--model.lr_scheduler.init_args.T_max", str(epochs),
        "--test_after_fit", "false",
    ]
    options = data_options(layout.plan, cell.task, layout.quick)
    if layout.quick:
        options |= QUICK["data"]
    for key, value in options.items():
        command += [f"--data.init_args.{key}", _option(value)]
    if cell.start is not None:
        command += ["--model.init.source", str(final_checkpoint(cell.start.folder(layout.runs)))]
        if cell.dna_init != "-":
            command += ["--model.init.dna_init", cell.dna_init]
    if folder.is_dir():
        # An interrupted fit starts over: continuing from its last.ckpt need not give the
        # uninterrupted run's row (the loop's random state), and a fit takes minutes.
        command += ["--overwrite", "true"]
    return command


def final_checkpoint(folder: Path) -> Path:
    """The last epoch's checkpoint of a finished fit: what counts (no selection on a validation
    split)."""
    last = folder / "checkpoints" / "last.ckpt"
    if not (folder / "fit.done").is_file() or not last.is_file():
        raise FileNotFoundError(f"{folder}: the fit has not finished (no fit.done / checkpoints/last.ckpt)")
    return last


def render_data(layout: Layout, names: list[str]) -> None:
    """Write the data roots ``names`` (``target``, ``source``, a test set's name, or
    ``calibrate<i>``: that candidate's root and its calibration set) that do not exist yet (each generator leaves an existing root of the same options alone)."""
    from dna_video.data.distractors import SyntheticDistractors

    for name in names:
        if name in ("target", "source"):
            args = dict(data_options(layout.plan, name, layout.quick), root=str(layout.train_root(name)))
        else:
            args = layout.set_args(name)
        started = time.time()
        SyntheticDistractors(**args).prepare_data()
        folders = [Path(args["root"])] + ([Path(args["test_root"])] if "test_root" in args else [])
        digests = {str(f.relative_to(layout.data)): folder_digest(f) for f in folders}
        _write_json(layout.data / f"{name}.digest.json", digests)
        print(f"data {name}: {args.get('test_root', args['root'])} ({time.time() - started:.0f} s; "
              f"sha256 {', '.join(d[:12] for d in digests.values())})", flush=True)


def folder_digest(folder: Path) -> str:
    """sha256 over the names and bytes of every file of ``folder``: the data a run saw (the
    first version's renders differed between runs, which alone moved a result 3-18 points)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def data_digests(cell: Cell, layout: Layout) -> dict:
    """The digests of the data roots ``cell`` trains and is measured on (from rendering)."""
    import json

    names = [cell.task] + [s for s in layout.sets_of(cell) if s != "source"]
    out = {}
    for name in dict.fromkeys(names):
        path = layout.data / f"{name}.digest.json"
        if path.is_file():
            out.update(json.loads(path.read_text()))
    return out


def cell_record(cell: Cell, layout: Layout, command: list[str], code: Path) -> dict:
    """What produced a cell: the code's commit, the command, the environment, the threads."""
    record = {"cell": cell.name, "command": shlex.join(command), "cwd": str(code), **environment(tree_state(code))}
    record["omp_num_threads"] = single_thread_env()["OMP_NUM_THREADS"]  # the fit's, whatever this process has
    record["data_sha256"] = data_digests(cell, layout)
    return record


def run_cell(cell: Cell, layout: Layout, code: Path, launcher: ForkedCli | None = None,
             fit_env: dict[str, str] | None = None) -> str | None:
    """Fit (unless finished) and measure ``cell``; None when done, else what failed. The fit runs
    its command as a process of its own, or through ``launcher`` (the same command forked from a
    process that imported the toolkit once)."""
    from experiments.denoising.measure import measure

    folder = cell.folder(layout.runs)
    started = time.time()
    if not (folder / "fit.done").is_file():
        if folder.is_dir():  # what an interrupted fit left (its log stays, appended to)
            import shutil

            shutil.rmtree(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        command = fit_command(cell, layout)
        record = cell_record(cell, layout, command, code)
        log_path = folder.parent / "fit.log"
        with open(log_path, "a") as log:
            log.write(f"$ {record['command']}\n")
            log.flush()
            if launcher is None:
                env = single_thread_env(code) | (fit_env or {})  # fit_env: the sensitivity runs' changes
                code_ = subprocess.run(command, cwd=code, env=env, stdout=log,
                                       stderr=subprocess.STDOUT).returncode
            else:
                code_ = launcher.run(command, code, log_path)
        if code_ != 0:
            return f"fit failed (exit {code_}); log: {folder.parent / 'fit.log'}"
        record["fit_seconds"] = round(time.time() - started, 1)
        _write_json(folder / "provenance.json", record)
        (folder / "fit.done").write_text("")
    provenance = json.loads((folder / "provenance.json").read_text())
    commit = tree_state(code).commit
    if provenance["commit"] != commit:  # a row holds one commit: the fit's and the measure's
        return (f"fitted at {provenance['commit'][:12]} but measured now at {commit[:12]}: continue with "
                f"`--at {provenance['commit'][:12]}`, or remove {folder.parent} to run it again here")
    try:
        result = measure(cell, layout)
    except Exception as exc:  # noqa: BLE001 - reported with the cell; the other cells go on
        import traceback

        traceback.print_exc()
        return f"measuring failed: {type(exc).__name__}: {exc}"
    result["row"].update(commit=provenance["commit"] + ("+dirty" if provenance["dirty"] else ""),
                         cpu=provenance["cpu"], cpu_capability=provenance["cpu_capability"],
                         threads=provenance["torch_threads"], fit_seconds=provenance["fit_seconds"])
    result["provenance"] = provenance
    _write_json(folder / "cell.json", result)
    return None


def _write_json(path: Path, value: dict) -> None:
    from dna_video.common.atomic import write_json

    write_json(path, value)
