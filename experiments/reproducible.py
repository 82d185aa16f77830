"""What makes an experiment's run a function of its config, seed and environment: the code it
ran (a git worktree of one commit, never a tree being edited), one thread, and a record of all
of it beside the run.

* :func:`tree_state` / :func:`require_clean`: the commit of a checkout and whether it holds
  uncommitted changes (a runner refuses to start from such a tree unless told);
* :func:`worktree`: a checkout of one commit under the experiment's folder (``git worktree
  add --detach``), made once and reused;
* :func:`single_thread_env`: the environment of a run process: one OpenMP / MKL thread
  whatever ``--jobs`` is (results must not depend on how many runs share the machine);
* :func:`environment`: the record: commit, Python, platform, CPU, threads, library versions;
* :class:`ForkedCli`: ``python cli.py ...`` commands run from a process that imported the
  toolkit once, so that a grid of short fits does not spend most of its time importing.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["TreeState", "tree_state", "require_clean", "resolve_commit", "worktree", "single_thread_env", "environment",
           "ForkedCli", "LIBRARIES"]

#: Distributions whose versions a run records (those that can change a number).
LIBRARIES = ("torch", "torchvision", "lightning", "torchmetrics", "timm", "einops", "numpy", "scipy", "av",
             "decord", "jsonargparse", "pytorchvideo")


def _git(repo: Path, *args: str, strip: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo}: {done.stderr.strip() or 'failed'}")
    return done.stdout.strip() if strip else done.stdout


@dataclass(frozen=True)
class TreeState:
    """A checkout: its commit and the paths with uncommitted changes (untracked files that git
    does not ignore included)."""

    root: Path
    commit: str
    changes: tuple[str, ...]

    @property
    def dirty(self) -> bool:
        return bool(self.changes)

    @property
    def label(self) -> str:
        """The commit as a results file records it: ``<hash>`` or ``<hash>+dirty``."""
        return self.commit + ("+dirty" if self.dirty else "")


def tree_state(repo: Path) -> TreeState:
    """The commit and the uncommitted changes of the checkout at ``repo``."""
    root = Path(_git(repo, "rev-parse", "--show-toplevel"))
    # -z: "XY path" entries split by NUL, unquoted (a rename adds its source as one more entry).
    entries = _git(root, "status", "--porcelain", "-z", "--untracked-files=all", strip=False).split("\0")
    changes, skip = [], False
    for entry in entries:
        if skip or not entry:
            skip = False
            continue
        changes.append(entry[3:])
        skip = entry[0] in "RC"
    changes = tuple(changes)
    return TreeState(root, _git(root, "rev-parse", "HEAD"), changes)


def require_clean(repo: Path, allow_dirty: bool, what: str, outputs: tuple[str, ...] = ()) -> TreeState:
    """The state of ``repo``; a SystemExit naming the changed files when it has uncommitted
    changes and ``allow_dirty`` is false (``what``: the command, for the message). Changes
    under ``outputs`` (paths relative to the repository: the command's own results, rewritten
    by every run until they are committed) do not count."""
    state = tree_state(repo)
    changes = tuple(c for c in state.changes if not any(c == o or c.startswith(o.rstrip("/") + "/") for o in outputs))
    state = TreeState(state.root, state.commit, changes)
    if state.dirty and not allow_dirty:
        shown = ", ".join(state.changes[:5]) + (f" and {len(state.changes) - 5} more" if len(state.changes) > 5 else "")
        raise SystemExit(
            f"error: {state.root} has uncommitted changes ({shown}): {what} runs the committed code of "
            f"{state.commit[:12]} from a worktree, so these edits would not be in its results. Commit them, "
            "or pass --allow-dirty to run this tree as it is (its rows are then marked '+dirty' and cannot be "
            "reproduced with --only)"
        )
    return state


def resolve_commit(repo: Path, rev: str) -> str:
    """The full hash of ``rev`` (a hash, a branch, ``HEAD``...) in ``repo``."""
    return _git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")


def worktree(repo: Path, commit: str, parent: Path) -> Path:
    """A checkout of ``commit`` at ``parent/<commit[:12]>`` (created with ``git worktree add
    --detach`` unless it exists), with the repository's ``.venv`` linked in when there is one."""
    path = parent / commit[:12]
    if not (path / ".git").exists():
        parent.mkdir(parents=True, exist_ok=True)
        _git(repo, "worktree", "prune")
        _git(repo, "worktree", "add", "--detach", str(path), commit)
    head = _git(path, "rev-parse", "HEAD")
    if head != commit:
        raise RuntimeError(f"{path} is a worktree of {head[:12]}, not {commit[:12]}; remove it (git worktree remove)")
    venv = Path(repo) / ".venv"
    if venv.is_dir() and not (path / ".venv").exists():
        (path / ".venv").symlink_to(venv.resolve())
    return path


def single_thread_env(code: Path | None = None) -> dict[str, str]:
    """The environment of one run: one OpenMP / MKL thread, and ``code`` (a worktree) first on
    the import path so the run imports that checkout's package, not an installed one."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(state: TreeState | None = None) -> dict:
    """What a run's numbers depend on beyond its config and seed: the code (commit), Python,
    platform, CPU model, cores and the kernel path torch uses, the thread count torch uses here,
    library versions."""
    import torch

    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    record = {
        "python": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
        "cpu": _cpu_model(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        # The kernel path torch dispatches to (AVX2, AVX512...): alone it moved a run 5-33 points.
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "versions": versions,
    }
    if state is not None:
        record.update(commit=state.commit, dirty=state.dirty, changes=list(state.changes))
    return record


#: What the fork server imports once: everything ``cli.py fit`` needs (torch, Lightning, the toolkit).
CLI_PRELOAD = ("dna_video.training.cli",)
_server_env: dict[str, str] | None = None  # the environment this process's fork server was started with


def _cli_child(args: list[str], cwd: str, log: str) -> None:
    """In a child of the fork server: ``python cli.py ARGS`` from ``cwd``, output appended to ``log``."""
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["cli.py", *args]
    from dna_video.__main__ import main

    main(args)  # its exit status becomes the child's (SystemExit)


class ForkedCli:
    """Runs ``python cli.py ARGS`` commands as children of one process that imported the toolkit
    once (a ``multiprocessing`` fork server started with the runs' environment): the program,
    environment, working directory and import path of the command, without its seconds of
    importing torch and Lightning again for every run (most of a quick-grid fit). Each child
    starts from the server's freshly imported state, never from an earlier run's, so a run
    gives what the command gives in a process of its own (``--only`` checks that: it reruns a
    cell as a plain process).

    ``env`` is the runs' environment (:func:`single_thread_env`); the server is started with it,
    before the caller's threads exist (a fork server is single-threaded, so forking it is safe)."""

    def __init__(self, env: dict[str, str]) -> None:
        import multiprocessing
        from multiprocessing import forkserver

        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(list(CLI_PRELOAD))
        # cli.py's own default, read once when torch loads in the server (see cli.py).
        env = {"OMP_WAIT_POLICY": "PASSIVE", **env}
        global _server_env
        if _server_env is not None and _server_env != env:
            forkserver._forkserver._stop()  # one server per process: started again with this environment
        _server_env = env
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        try:
            forkserver.ensure_running()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def run(self, command: list[str], cwd: Path, log: Path) -> int:
        """Run ``command`` (``[python, "cli.py", *args]``) from ``cwd``, its output appended to
        ``log``; its exit status (negative: the signal that ended it)."""
        if len(command) < 2 or Path(command[1]).name != "cli.py":
            raise ValueError(f"ForkedCli runs `python cli.py ...` commands, not {command[:3]}")
        child = self._context.Process(target=_cli_child, args=(command[2:], str(cwd), str(log)))
        child.start()
        child.join()
        return child.exitcode
