"""Section ``onnx``: an exported model on ONNX Runtime against the same network in PyTorch eager
(inference, fp32, CPU), what ``dna-video predict MODEL.onnx`` and ``predict CKPT`` spend on the
network.

* Models: our DnA TimeSformer at the quickstart's geometry (``tiny``: D 64, 2 heads, 4 blocks,
  8 x 64 x 64) and at TimeSformer-B width with 2 blocks (8 x 224 x 224; every block a
  TimeSformer-B block), random weights (``temporal_fc`` too, so the temporal attention counts),
  exported by :func:`dna_video.export.program.export_onnx` as ``dna-video export onnx`` does.
* Rows per model: clips/s at the geometry's batch (8 tiny clips, 1 TimeSformer-B clip: the
  views of one video go through as one batch), and the latency of one clip (batch 1, ms).
* ONNX Runtime gets as many intra-op threads as torch has (``--threads``, else torch's
  default), idle threads sleeping as torch's do under ``OMP_WAIT_POLICY=PASSIVE``
  (:func:`dna_video.prediction.onnx_backend.session_options`, what ``predict`` uses) and its default graph
  optimisations; both run interleaved round by round.
* int8 beside fp32 (``dna-video export onnx --int8``: :func:`dna_video.export.int8.quantize_onnx`,
  ONNX Runtime's dynamic quantisation of the same file), per model: file size, weight bytes
  (the initialisers), clips/s and one clip's latency, timed in the same interleaved rounds.
* Test top-1 of the quickstart model, int8 beside fp32: the best checkpoint of a quickstart run
  (``$DNA_BENCH_QUICKSTART_RUN``, else the newest ``runs/quickstart/version_N`` with a
  ``summary.json`` under the current directory: ``python cli.py fit --config
  configs/quickstart.yaml`` makes one) exported both ways, on the videos and labels of its
  ``test_predictions.csv`` (the quickstart's test split; relative paths from the folder holding
  the run's ``runs/``), each video's views read once and
  given to both models as ``predict MODEL.onnx`` gives them. Without such a run these rows are
  left out with a line saying so.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from .harness import Row, Timing, interleaved, rate_row, time_row
from .model import QUICKSTART, REDUCED, Geometry, build_ours, inference

__all__ = ["run", "GEOMETRIES", "quickstart_run", "QUICKSTART_RUN_ENV"]

SECTION = "onnx"
GEOMETRIES: dict[str, Geometry] = {"quickstart (tiny)": QUICKSTART, "TimeSformer-B width, 2 blocks": REDUCED}
#: Names the quickstart run (its folder, with summary.json) whose model the test top-1 rows measure.
QUICKSTART_RUN_ENV = "DNA_BENCH_QUICKSTART_RUN"
# Test videos of the accuracy rows in a --quick smoke run (all of the split otherwise).
QUICK_TEST_VIDEOS = 30


def _model(g: Geometry) -> torch.nn.Module:
    torch.manual_seed(0)
    net = build_ours(g, "dna").eval()
    with torch.no_grad():
        for p in net.parameters():  # temporal_fc starts at zero: noise everywhere
            p.add_(torch.randn_like(p) * 0.02)
    return net


def _export(net: torch.nn.Module, g: Geometry, folder: Path) -> Path:
    from dna_video.export.metadata import runtime_metadata
    from dna_video.export.program import export_onnx

    settings = {"num_frames": g.num_frames, "sampling_rate": 8, "crop_size": g.img_size,
                "mean": (0.45,) * 3, "std": (0.225,) * 3}
    return export_onnx(net, folder / "model.onnx", runtime_metadata(net, settings))


def _session(path: Path):
    import onnxruntime as ort

    from dna_video.prediction.onnx_backend import session_options

    options = session_options(torch.get_num_threads())  # as predict MODEL.onnx makes it
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _mib(path: Path) -> tuple[float, float]:
    """(file, weights) in MiB: the file's size and its initialisers' bytes."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    weights = sum(numpy_helper.to_array(tensor).nbytes for tensor in model.graph.initializer)
    return path.stat().st_size / 2**20, weights / 2**20


def _ort_inference(session, video: np.ndarray):
    def step() -> None:
        session.run(None, {"video": video})

    return step


def run(rounds: int = 5, quick: bool = False) -> list[Row]:
    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"onnx: skipped, {', '.join(missing)} not installed (pip install -e '.[bench]')", file=sys.stderr)
        return []
    from dna_video.export.int8 import quantize_onnx

    rounds = max(3, rounds // 2) if quick else rounds
    rows: list[Row] = []
    for label, g in GEOMETRIES.items():
        net = _model(g)
        with tempfile.TemporaryDirectory() as folder:
            fp32_path = _export(net, g, Path(folder))
            int8_path = quantize_onnx(fp32_path)
            (fp32_file, fp32_weights), (int8_file, int8_weights) = _mib(fp32_path), _mib(int8_path)
            session, int8_session = _session(fp32_path), _session(int8_path)
        generator = torch.Generator().manual_seed(0)
        video = torch.randn(g.batch, 3, g.num_frames, g.img_size, g.img_size, generator=generator)
        one = video[:1].contiguous()
        video_np, one_np = video.numpy(), one.numpy()
        cases = {"torch batch": inference(net, video), "onnx batch": _ort_inference(session, video_np),
                 "int8 batch": _ort_inference(int8_session, video_np)}
        if g.batch > 1:
            cases |= {"torch one": inference(net, one), "onnx one": _ort_inference(session, one_np),
                      "int8 one": _ort_inference(int8_session, one_np)}
        (logits,) = session.run(None, {"video": video_np})
        (int8_logits,) = int8_session.run(None, {"video": video_np})
        with torch.no_grad():
            gap = float(np.abs(logits - net(video).numpy()).max())
        int8_gap = float(np.abs(int8_logits - logits).max())
        t: dict[str, Timing] = interleaved(cases, rounds=rounds, warmup=1)
        single = "one" if g.batch > 1 else "batch"
        case = f"inference fp32, {label}: {g.describe()}"
        one_case = case.replace(f"batch {g.batch}", "batch 1")
        int8_case = f"int8 (export onnx --int8), {label}: {g.describe()}"
        int8_one = (f"{int8_case.replace(f'batch {g.batch}', 'batch 1')}, logits differ from fp32's by at most "
                    f"{int8_gap:.1e} (largest logit magnitude {float(np.abs(logits).max()):.1f})")
        rows += [
            rate_row(SECTION, case, g.batch, "ONNX Runtime", t["onnx batch"], "PyTorch eager", t["torch batch"]),
            time_row(SECTION, f"{one_case}, logits differ by at most {gap:.1e}", "ms per clip",
                     "ONNX Runtime", t[f"onnx {single}"], "PyTorch eager", t[f"torch {single}"]),
            Row(SECTION, int8_case, "file MiB", "ONNX int8", int8_file, "ONNX fp32", fp32_file),
            Row(SECTION, int8_case, "weights MiB", "ONNX int8", int8_weights, "ONNX fp32", fp32_weights),
            rate_row(SECTION, int8_case, g.batch, "ONNX int8", t["int8 batch"], "ONNX fp32", t["onnx batch"]),
            time_row(SECTION, int8_one, "ms per clip", "ONNX int8", t[f"int8 {single}"], "ONNX fp32", t[f"onnx {single}"]),
        ]
    return rows + _test_top1_rows(QUICK_TEST_VIDEOS if quick else None)


def quickstart_run() -> Path | None:
    """The quickstart run the accuracy rows measure: ``$DNA_BENCH_QUICKSTART_RUN`` (a run folder
    with ``summary.json``), else the highest ``runs/quickstart/version_N`` under the current
    directory that has one; None when there is none."""
    named = os.environ.get(QUICKSTART_RUN_ENV)
    if named:
        if not (Path(named) / "summary.json").is_file():
            raise FileNotFoundError(f"${QUICKSTART_RUN_ENV}={named}: no summary.json there (a run folder of "
                                    "python cli.py fit --config configs/quickstart.yaml)")
        return Path(named)
    runs = [p.parent for p in Path("runs/quickstart").glob("version_*/summary.json")
            if p.parent.name.removeprefix("version_").isdigit()]
    return max(runs, key=lambda p: int(p.name.removeprefix("version_")), default=None)


def _test_top1_rows(limit: int | None) -> list[Row]:
    """Test top-1 of the quickstart run's best checkpoint exported as fp32 and int8 ONNX, on
    the videos of the run's test_predictions.csv (the first ``limit`` of them when given)."""
    from dna_video.export.int8 import quantize_onnx
    from dna_video.export.metadata import runtime_metadata
    from dna_video.export.program import export_onnx
    from dna_video.data.video import VideoDecodeError, VideoTooSmallError
    from dna_video.prediction.onnx_backend import load_onnx_model
    from dna_video.prediction.torch_backend import load_model
    from dna_video.prediction.views import load_views

    run_dir = quickstart_run()
    if run_dir is None:
        print(f"onnx: the quickstart model's test top-1 rows left out: no runs/quickstart/version_N/summary.json "
              f"here and no ${QUICKSTART_RUN_ENV} (python cli.py fit --config configs/quickstart.yaml makes one)",
              file=sys.stderr)
        return []
    summary = json.loads((run_dir / "summary.json").read_text())
    checkpoint = Path(summary["fit"]["best_checkpoint"])
    # Relative paths are relative to where the run was made: the folder holding runs/.
    made_in = run_dir.resolve().parents[2]
    with open(run_dir / "test_predictions.csv", newline="") as f:
        videos = [(str(made_in / row["path"]), int(row["label"])) for row in csv.DictReader(f)][:limit]
    loaded = load_model(checkpoint)
    metadata = runtime_metadata(loaded.net, dataclasses.asdict(loaded.settings), loaded.class_names,
                                loaded.aggregate, source=checkpoint.name)
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as folder:
        fp32_path = export_onnx(loaded.net, Path(folder) / "quickstart.onnx", metadata)
        int8_path = quantize_onnx(fp32_path)
        fp32 = load_onnx_model(fp32_path, device="cpu", threads=threads)
        int8 = load_onnx_model(int8_path, device="cpu", threads=threads)
    right = {"fp32": 0, "int8": 0}
    agree, unreadable, prob_gap = 0, 0, 0.0
    for path, label in videos:
        try:
            views = load_views(path, fp32.settings, fp32.patch_size).views[None]
        except (VideoDecodeError, VideoTooSmallError, ValueError):
            unreadable += 1  # counted in the row's case, never silently dropped
            continue
        fp32_probs, int8_probs = fp32.probs(views)[0], int8.probs(views)[0]
        top = int(fp32_probs.argmax())
        right["fp32"] += top == label
        right["int8"] += int(int8_probs.argmax()) == label
        agree += int(int8_probs.argmax()) == top
        prob_gap = max(prob_gap, abs(float(int8_probs[top] - fp32_probs[top])))
    read = len(videos) - unreadable
    torch_top1 = summary.get("test", {}).get("metrics", {}).get("test/top1")
    case = (f"test top-1, quickstart model ({run_dir}/checkpoints/{checkpoint.name}"
            f"{'' if torch_top1 is None else f', PyTorch test {100 * torch_top1:.1f}%'}), {read} test videos"
            f"{f' ({unreadable} unreadable, left out)' if unreadable else ''}: int8 top-1 equals fp32's on "
            f"{agree} / {read}, top-1 probability within {prob_gap:.1e}; right: int8 {right['int8']}, fp32 {right['fp32']}")
    return [Row(SECTION, case, "test top-1 %", "ONNX int8", 100 * right["int8"] / max(read, 1),
                "ONNX fp32", 100 * right["fp32"] / max(read, 1))]
