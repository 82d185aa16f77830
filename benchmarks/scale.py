"""Section ``scale``: the real datasets' size, this checkout against a baseline commit, side by side.

    python -m benchmarks --sections scale                          # baseline: commit 2f22479
    python -m benchmarks --sections scale --baseline-tree ../old   # any other checkout
    python -m benchmarks --sections scale --quick                  # one round, fewer clips

Trees of Toyota Smarthome's 16,129 clip names and NTU RGB+D 60's 56,880 AVI names
(:mod:`benchmarks.full_size`, built once under the cache) and every measurement in a process of
its own (:mod:`benchmarks.scale_probe`), run once with this checkout's ``dna_video`` and once
with the baseline's (``git archive`` of ``--baseline``, extracted under the cache), the two
interleaved round by round, medians shown:

1. per dataset and protocol: DataModule ``setup("fit")`` + ``setup("test")`` (target <= 2 s)
   and the resident memory it adds; the first training batch from a new DataModule (setup,
   loader, 2 worker processes started, 8 frames of 224, batch 8; target <= 10 s) and the peak
   RSS of its process; per dataset: ``dna-video prepare DATASET ROOT`` (the whole command in a
   new interpreter, target <= 5 s), its scan alone and the scan's peak RSS;
2. the unique memory (USS) of each of 4 DataLoader workers over one epoch of NTU's
   cross-subject training split (40,320 videos; each clip decoded and transformed small: the
   index is what grows): growth per worker (target <= 20 MiB); one epoch per tree;
3. CPU seconds per clip of the data pipeline, per format (Toyota's 640 x 480 H.264 mp4,
   NTU's 1920 x 1080 MPEG-4 AVI, each as shipped and after ``prepare --transcode
   --short-side 256``): training clips (8 frames, 224 crop) and evaluation videos of 1 x 3
   and 10 x 3 views; one worker, one thread, CPU time of the process and its worker (not
   wall time: steady on a shared machine). From it, the cores that feed 50 / 100 / 200
   training clips/s.

``--quick``: one round, two files per format, the first 80 batches of the workers' epoch.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from .full_size import expected_counts, full_size_tree
from .harness import Row

__all__ = ["run", "baseline_tree", "BASELINE"]

BASELINE = "2f22479"  # main before the full-size work (issue 38)
REPO = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().with_name("scale_probe.py")
PROTOCOLS = {"ntu60": ("cs", "cv"), "toyota_smarthome": ("cs", "cv1", "cv2")}
RATES = (50, 100, 200)


def baseline_tree(cache: str, ref: str = BASELINE) -> Path:
    """The files of commit ``ref`` under ``cache/baseline/<commit>`` (``git archive``, once)."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{ref}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    folder = Path(cache) / "baseline" / commit[:12]
    if (folder / "dna_video" / "__init__.py").is_file():
        return folder
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=folder.parent))
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(partial, filter="data")
    if folder.exists():
        shutil.rmtree(folder)
    partial.rename(folder)
    return folder


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "JSONARGPARSE_DEPRECATION_WARNINGS": "off"}


def probe(tree: Path, task: str, timeout: float = 1800, **args) -> dict:
    """One :mod:`benchmarks.scale_probe` measurement with ``tree``'s ``dna_video``."""
    done = subprocess.run([sys.executable, str(PROBE), task, json.dumps(args)], cwd=tree, env=_env(tree),
                          capture_output=True, text=True, timeout=timeout)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"probe {task} in {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(line[len("RESULT "):])
    if not Path(result["dna_video"]).resolve().is_relative_to(Path(tree).resolve()):
        raise RuntimeError(f"probe {task} measured {result['dna_video']}, not the tree {tree}")
    return result


def command(tree: Path, args: list[str], timeout: float = 600) -> dict:
    """Wall seconds of ``python -m dna_video ARGS`` with ``tree``'s ``dna_video``, interpreter
    start to exit (what a user waits for)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dna_video", *args], cwd=tree, env=_env(tree), capture_output=True,
                          text=True, timeout=timeout)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"dna-video {' '.join(args)} in {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {"wall_s": seconds, "stdout": done.stdout}


def _interleaved(trees: dict[str, Path], rounds: int, task: str, measure=probe, **args) -> dict[str, list[dict]]:
    """``rounds`` measurements of each tree (``measure(tree, task, **args)``), the trees' order
    alternating round by round."""
    results: dict[str, list[dict]] = {name: [] for name in trees}
    names = list(trees)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            results[name].append(measure(trees[name], task, **args))
    return results


def _median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def _row(case: str, metric: str, ours: float, base: float, target: str = "", limit: float | None = None,
         higher_is_better: bool = False) -> Row:
    met = None if limit is None else (ours >= limit if higher_is_better else ours <= limit)
    return Row("scale", case, metric, "this checkout", ours, "baseline", base, target, met)


def _setup_rows(trees: dict[str, Path], roots: dict[str, str], rounds: int) -> list[Row]:
    rows = []
    for dataset, protocols in PROTOCOLS.items():
        for protocol in protocols:
            got = _interleaved(trees, rounds, "setup", dataset=dataset, root=roots[dataset], protocol=protocol)
            want = expected_counts(dataset)[protocol]
            for name, results in got.items():  # every split the real dataset's size, both trees
                videos = results[0]["videos"]
                assert all(videos[s] == n for s, n in want.items()), (name, dataset, protocol, videos, want)
            rows.append(_row(f"{dataset} {protocol}: DataModule setup('fit') + setup('test')", "s",
                             _median(got["ours"], "setup_s"), _median(got["baseline"], "setup_s"), "<= 2 s", 2.0))
            rows.append(_row(f"{dataset} {protocol}: resident memory that setup adds (the index of "
                             f"{sum(want.values()):,} videos)", "MiB", _median(got["ours"], "index_rss_mib"),
                             _median(got["baseline"], "index_rss_mib")))
    return rows


def _prepare_rows(trees: dict[str, Path], roots: dict[str, str], rounds: int) -> list[Row]:
    rows = []
    for dataset in PROTOCOLS:
        got = _interleaved(trees, rounds, "scan", dataset=dataset, root=roots[dataset])
        for results in got.values():
            assert results[0]["files"] == len(os.listdir(roots[dataset])), results[0]
        rows.append(_row(f"{dataset}: `dna-video prepare {dataset} ROOT` scan (in the process, imports apart)", "s",
                         _median(got["ours"], "scan_s"), _median(got["baseline"], "scan_s")))
        whole = _interleaved(trees, rounds, ["prepare", dataset, roots[dataset]], measure=command)
        for results in whole.values():
            assert f"{len(os.listdir(roots[dataset]))} video files" in results[0]["stdout"], results[0]["stdout"][-500:]
        rows.append(_row(f"{dataset}: `dna-video prepare {dataset} ROOT`, the whole command (interpreter start to exit; "
                         f"torch and Lightning imported: {got['ours'][0]['torch_imported']} / "
                         f"{got['baseline'][0]['torch_imported']})", "s", _median(whole["ours"], "wall_s"),
                         _median(whole["baseline"], "wall_s"), "<= 5 s", 5.0))
        rows.append(_row(f"{dataset}: peak RSS of the prepare scan's process", "MiB",
                         _median(got["ours"], "peak_rss_mib"), _median(got["baseline"], "peak_rss_mib")))
    return rows


def _first_batch_rows(trees: dict[str, Path], roots: dict[str, str], rounds: int) -> list[Row]:
    rows = []
    for dataset, protocols in PROTOCOLS.items():
        for protocol in protocols:
            got = _interleaved(trees, rounds, "first_batch", dataset=dataset, root=roots[dataset], protocol=protocol,
                               workers=2, batch=8)
            for results in got.values():
                assert results[0]["shape"] == [8, 3, 8, 224, 224], results[0]["shape"]
            rows.append(_row(f"{dataset} {protocol}: first training batch from a new DataModule (setup, 2 workers "
                             "started, batch 8 of 8x224; imports apart)", "s", _median(got["ours"], "first_batch_s"),
                             _median(got["baseline"], "first_batch_s"), "<= 10 s", 10.0))
            rows.append(_row(f"{dataset} {protocol}: peak RSS of that process (torch and Lightning included)", "MiB",
                             _median(got["ours"], "peak_rss_mib"), _median(got["baseline"], "peak_rss_mib")))
    return rows


def _worker_rows(trees: dict[str, Path], roots: dict[str, str], quick: bool, notes: list[str]) -> list[Row]:
    batch = 64
    limit = 80 if quick else None  # --quick: the first 80 of the epoch's 630 batches
    got = {name: probe(tree, "worker_memory", dataset="ntu60", root=roots["ntu60"], protocol="cs", workers=4,
                       batch=batch, max_batches=limit) for name, tree in trees.items()}
    for name, result in got.items():
        assert result["clips"] == (result["train_videos"] // batch if limit is None else limit) * batch, result
        notes.append(f"worker USS, {name}: start {', '.join(f'{x:.1f}' for x in result['uss_start_mib'])} MiB, "
                     f"end {', '.join(f'{x:.1f}' for x in result['uss_end_mib'])} MiB; "
                     f"{result['clips']} clips in {result['epoch_s']:.0f} s")
    span = "one epoch (40,320 videos)" if limit is None else f"the first {limit * batch:,} clips of an epoch (--quick)"
    return [_row(f"ntu60 cs: USS growth of each of 4 DataLoader workers over {span}; the largest", "MiB",
                 max(got["ours"]["growth_mib"]), max(got["baseline"]["growth_mib"]), "<= 20 MiB", 20.0)]


# -- point 5: cores per GPU ---------------------------------------------------------------


def format_files(cache: str, quick: bool) -> dict[str, list[str]]:
    """format -> files: Toyota's and NTU's formats as shipped and after ``prepare --transcode
    --short-side 256`` (the same files as the ``data`` section, written once)."""
    from dna_video.tools import prepare

    from .data import _write_avi
    from .videos import VideoSpec, make_videos

    count = 2 if quick else 4
    mp4 = make_videos(cache, VideoSpec(count=8, frames=300, height=480, width=640, gops=(16, 250)))[250][:count]
    folder = Path(cache) / "1080p_avi"
    folder.mkdir(parents=True, exist_ok=True)
    avi = [folder / f"S001C00{1 + k % 3}P001R001A{k + 1:03d}_rgb.avi" for k in range(count)]
    for k, path in enumerate(avi):
        if not path.exists():
            _write_avi(path, seed=k)
    formats = {"640x480 H.264 mp4 (Toyota, keyframe every 250)": mp4,
               "1920x1080 MPEG-4 AVI (NTU, keyframe every 12)": [str(p) for p in avi]}
    out = {}
    for name, files in formats.items():
        out[name] = files
        prepared = []
        for src in files:
            dst = Path(cache) / "prepared_256" / Path(src).parent.name / (Path(src).stem + ".mp4")
            result = prepare.transcode_file(src, str(dst), short_side=256, gop=16, crf=23, preset="veryfast")
            if result["status"] not in ("done", "skipped"):
                raise RuntimeError(f"prepare failed on {src}: {result}")
            prepared.append(str(dst))
        out[name.split(" (")[0] + " after prepare --transcode --short-side 256"] = prepared
    return out


MODES = (("train",), ("eval", 1, 3), ("eval", 10, 3))


def _throughput_rows(trees: dict[str, Path], cache: str, rounds: int, quick: bool,
                     notes: list[str]) -> tuple[list[Row], list[dict]]:
    """Rows of CPU throughput per format, and the cores table (this checkout's numbers)."""
    rows, table = [], []
    what = {MODES[0]: "training clips (8 frames, crop 224)", MODES[1]: "evaluation videos of 1x3 views",
            MODES[2]: "evaluation videos of 10x3 views"}
    for name, files in format_files(cache, quick).items():
        got = _interleaved(trees, rounds, "throughput", files=files, modes=MODES, batch=4, repeat_train=2)
        per_item = {}  # mode -> tree -> median CPU seconds per clip / video
        for k, mode in enumerate(MODES):
            per_item[mode] = {tree: statistics.median(r["modes"][k]["cpu_s_per_item"] for r in results)
                              for tree, results in got.items()}
            unit = "clips/s per core" if mode[0] == "train" else "videos/s per core"
            rows.append(_row(f"{name}: {what[mode]}", unit, 1 / per_item[mode]["ours"], 1 / per_item[mode]["baseline"]))
        train = per_item[MODES[0]]["ours"]
        table.append({"format": name, "clips_per_core": 1 / train, "cores": {rate: train * rate for rate in RATES},
                      "views_per_core": {mode[1:]: mode[1] * mode[2] / per_item[mode]["ours"] for mode in MODES[1:]}})
    notes.append("cores to feed a GPU (this checkout; training clips of 8x224, CPU seconds per clip of one worker "
                 "and one thread, so cores = clips/s x CPU seconds per clip; decoding threads and other work apart):")
    for row in table:
        notes.append(f"  {row['format']}: {row['clips_per_core']:.1f} clips/s per core -> "
                     + ", ".join(f"{c:.1f} cores for {r} clips/s" for r, c in row["cores"].items())
                     + "; evaluation " + ", ".join(f"{v:.1f} views/s per core at {m[0]}x{m[1]}"
                                                   for m, v in row["views_per_core"].items()))
    return rows, table


def run(cache: str, rounds: int = 3, quick: bool = False, baseline: str = BASELINE, baseline_path: str | None = None,
        notes: list[str] | None = None) -> list[Row]:
    notes = [] if notes is None else notes
    cache = str(Path(cache).resolve())  # the probes run in the measured tree's folder
    trees = {"ours": REPO, "baseline": Path(baseline_path).resolve() if baseline_path else baseline_tree(cache, baseline)}
    notes.append(f"scale baseline: {trees['baseline']}" + ("" if baseline_path else f" (git archive of {baseline})"))
    roots = {dataset: str(full_size_tree(cache, dataset)) for dataset in PROTOCOLS}
    rounds = 1 if quick else rounds
    rows: list[Row] = []
    parts = [("setup", lambda: _setup_rows(trees, roots, rounds)),
             ("prepare scan", lambda: _prepare_rows(trees, roots, rounds)),
             ("first batch", lambda: _first_batch_rows(trees, roots, rounds)),
             ("worker memory", lambda: _worker_rows(trees, roots, quick, notes)),
             ("throughput", lambda: _throughput_rows(trees, cache, rounds, quick, notes)[0])]
    for part, measure in parts:
        t0 = time.perf_counter()
        rows += measure()
        print(f"[scale: {part}, {time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
    notes.append(f"scale: {rounds} interleaved round(s) of every measurement but the worker memory (one epoch "
                 "per tree, the trees one after the other); each a process of its own")
    return rows
