"""One measurement of the ``scale`` section, in a process of its own (``python scale_probe.py TASK
JSON``): the code measured is whatever ``dna_video`` the process imports (the benchmark sets
``PYTHONPATH`` to this checkout or to the baseline's tree), so only APIs that both have are used.
Prints one JSON object: the task's numbers, plus this process's peak RSS and CPU seconds.

Tasks:

* ``setup``: a DataModule of the dataset and protocol, ``setup("fit")`` then ``setup("test")``;
  the resident memory they add (the index and what building it leaves behind).
* ``first_batch``: ``setup("fit")``, the training loader, its first batch (worker start-up
  included), at the paper's recipe (8 frames, crop 224).
* ``scan``: ``dna_video.tools.prepare.scan`` of the root (its import included: what the
  ``prepare`` command adds to the interpreter's start).
* ``worker_memory``: the training split through a loader of ``workers`` processes, one whole
  epoch (or its first ``max_batches``), each item decoded and transformed small (the index is
  what is measured); the unique memory (USS) of every worker after its first batch and at the
  end.
* ``throughput``: clips of the given files through the loader with ONE worker, at the paper's
  recipe, for each mode asked (training; evaluation with ``clips`` x ``crops`` views); CPU
  seconds of this process and its worker per clip (training) or per video (evaluation).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the loader's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: ``getrusage``'s ru_maxrss keeps the peak of
    the process that started this one, across ``exec``)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _rss_mib() -> float:
    """This process's resident memory now (VmRSS)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def _uss_mib(pid: int) -> float:
    """Unique set size (private pages, clean and dirty) of a process, from /proc."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total / 1024


def _datamodule(dataset: str, root: str, protocol: str, **kwargs):
    if dataset == "ntu60":
        from dna_video.data.ntu import NTURGBD60 as cls
    else:
        from dna_video.data.smarthome import ToyotaSmarthome as cls
    return cls(root, protocol=protocol, **kwargs)


def setup(args: dict) -> dict:
    t0 = time.perf_counter()
    _datamodule(args["dataset"], args["root"], args["protocol"], num_workers=0)  # imports
    rss0, t1 = _rss_mib(), time.perf_counter()
    dm = _datamodule(args["dataset"], args["root"], args["protocol"], num_workers=0)
    dm.setup("fit")
    t2 = time.perf_counter()
    dm.setup("test")
    t3 = time.perf_counter()
    return {"import_s": t1 - t0, "fit_s": t2 - t1, "test_s": t3 - t2, "setup_s": t3 - t1,
            "index_rss_mib": _rss_mib() - rss0, "videos": {split: len(d) for split, d in dm.datasets.items()}}


def first_batch(args: dict) -> dict:
    _datamodule(args["dataset"], args["root"], args["protocol"], num_workers=0)  # imports
    t0 = time.perf_counter()
    dm = _datamodule(args["dataset"], args["root"], args["protocol"], num_workers=args["workers"],
                     batch_size=args["batch"])
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    seconds = time.perf_counter() - t0
    return {"first_batch_s": seconds, "shape": list(batch["video"].shape)}


def scan(args: dict) -> dict:
    t0 = time.perf_counter()
    from dna_video.tools import prepare

    t1 = time.perf_counter()
    files, reports = prepare.scan(args["dataset"], args["root"])
    t2 = time.perf_counter()
    return {"import_s": t1 - t0, "scan_s": t2 - t1, "files": len(files),
            "torch_imported": "torch" in sys.modules, "lightning_imported": "lightning" in sys.modules}


def worker_memory(args: dict) -> dict:
    dm = _datamodule(args["dataset"], args["root"], args["protocol"], num_workers=args["workers"],
                     batch_size=args["batch"], persistent_workers=True, num_frames=2, sampling_rate=1,
                     train_short_side=(16, 16), crop_size=16, multiprocessing_context="fork")
    dm.setup("fit")
    loader = dm.train_dataloader()
    iterator = iter(loader)
    next(iterator)
    workers = [w.pid for w in loader._iterator._workers]  # persistent workers: the loader keeps its iterator
    time.sleep(0.5)  # every worker has loaded its first batch (prefetch)
    start = [_uss_mib(pid) for pid in workers]
    clips, batches = args["batch"], 1
    limit = args.get("max_batches")  # None: the whole epoch (a --quick run reads a part)
    t0 = time.perf_counter()
    for batch in iterator:
        clips += batch["video"].shape[0]
        batches += 1
        if limit is not None and batches >= limit:
            break
    seconds = time.perf_counter() - t0
    end = [_uss_mib(pid) for pid in workers]
    del iterator, loader  # the workers end with the loader
    return {"workers": len(workers), "clips": clips, "train_videos": len(dm.datasets["train"]), "epoch_s": seconds,
            "uss_start_mib": start, "uss_end_mib": end, "growth_mib": [b - a for a, b in zip(start, end)]}


def throughput(args: dict) -> dict:
    """CPU seconds per clip (training) or per video (evaluation of ``clips`` x ``crops`` views)
    over ``args["files"]``, for each of ``args["modes"]`` (``["train"]`` or ``["eval", clips,
    crops]``), each mode through a loader of its own with one worker and one thread."""
    import torch

    from dna_video.data.datamodule import VideoDataModule
    from dna_video.data.dataset import VideoRecord

    torch.set_num_threads(1)

    class Files(VideoDataModule):
        @property
        def class_names(self):
            return ["x"]

        def build_split(self, split):
            repeat = args.get("repeat_train", 1) if split == "train" else 1
            return [VideoRecord(path, 0) for path in args["files"]] * repeat

    out = []
    for mode in args["modes"]:
        clips, crops = mode[1:] if mode[0] == "eval" else (1, 3)
        dm = Files(root="", batch_size=args["batch"], num_workers=1, test_num_clips=clips, test_num_crops=crops,
                   multiprocessing_context="fork")
        dm.setup("fit" if mode[0] == "train" else "test")
        loader = dm.train_dataloader() if mode[0] == "train" else dm.test_dataloader()
        next(iter(loader))  # warm: the decoders loaded, the files in the page cache (a loader of its own)
        cpu0, t0 = _cpu_seconds(), time.perf_counter()
        items = 0
        for batch in loader:  # the exhausted loader joins its worker: its CPU time is counted
            items += batch["video"].shape[0]
        seconds, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
        out.append({"mode": mode, "items": items, "cpu_s": cpu, "wall_s": seconds, "cpu_s_per_item": cpu / items})
    return {"modes": out}


TASKS = {f.__name__: f for f in (setup, first_batch, scan, worker_memory, throughput)}


def main() -> None:
    task, args = sys.argv[1], json.loads(sys.argv[2])
    import logging

    logging.basicConfig(level=logging.WARNING)
    result = TASKS[task](args)
    result["peak_rss_mib"] = _peak_rss_mib()
    result["pid"] = os.getpid()
    import dna_video

    result["dna_video"] = dna_video.__file__  # which tree was measured
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
