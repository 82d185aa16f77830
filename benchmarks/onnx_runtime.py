"""Section ``onnx``: an exported model on ONNX Runtime against the same network in PyTorch eager
(inference, fp32, CPU), what ``dna-video predict MODEL.onnx`` and ``predict CKPT`` spend on the
network.

* Models: our DnA TimeSformer at the quickstart's geometry (``tiny``: D 64, 2 heads, 4 blocks,
  8 x 64 x 64) and at TimeSformer-B width with 2 blocks (8 x 224 x 224; every block a
  TimeSformer-B block), random weights (``temporal_fc`` too, so the temporal attention counts),
  exported by :func:`dna_video.checkpoints.deploy.export_onnx` as ``dna-video export onnx`` does.
* Rows per model: clips/s at the geometry's batch (8 tiny clips, 1 TimeSformer-B clip: the
  views of one video go through as one batch), and the latency of one clip (batch 1, ms).
* ONNX Runtime gets as many intra-op threads as torch has (``--threads``, else torch's
  default), idle threads sleeping as torch's do under ``OMP_WAIT_POLICY=PASSIVE``
  (:func:`dna_video.runtime.model.session_options`, what ``predict`` uses) and its default graph
  optimisations; both run interleaved round by round.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from .harness import Row, Timing, interleaved, rate_row, time_row
from .model import QUICKSTART, REDUCED, Geometry, build_ours, inference

__all__ = ["run", "GEOMETRIES"]

SECTION = "onnx"
GEOMETRIES: dict[str, Geometry] = {"quickstart (tiny)": QUICKSTART, "TimeSformer-B width, 2 blocks": REDUCED}


def _model(g: Geometry) -> torch.nn.Module:
    torch.manual_seed(0)
    net = build_ours(g, "dna").eval()
    with torch.no_grad():
        for p in net.parameters():  # temporal_fc starts at zero: noise everywhere
            p.add_(torch.randn_like(p) * 0.02)
    return net


def _session(net: torch.nn.Module, g: Geometry, folder: Path):
    import onnxruntime as ort

    from dna_video.checkpoints.deploy import export_onnx, runtime_metadata
    from dna_video.runtime.model import session_options

    settings = {"num_frames": g.num_frames, "sampling_rate": 8, "crop_size": g.img_size,
                "mean": (0.45,) * 3, "std": (0.225,) * 3}
    path = export_onnx(net, folder / "model.onnx", runtime_metadata(net, settings))
    options = session_options(torch.get_num_threads())  # as predict MODEL.onnx makes it
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _ort_inference(session, video: np.ndarray):
    def step() -> None:
        session.run(None, {"video": video})

    return step


def run(rounds: int = 5, quick: bool = False) -> list[Row]:
    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"onnx: skipped, {', '.join(missing)} not installed (pip install -e '.[bench]')", file=sys.stderr)
        return []
    rounds = max(3, rounds // 2) if quick else rounds
    rows: list[Row] = []
    for label, g in GEOMETRIES.items():
        net = _model(g)
        with tempfile.TemporaryDirectory() as folder:
            session = _session(net, g, Path(folder))
        generator = torch.Generator().manual_seed(0)
        video = torch.randn(g.batch, 3, g.num_frames, g.img_size, g.img_size, generator=generator)
        one = video[:1].contiguous()
        video_np, one_np = video.numpy(), one.numpy()
        cases = {"torch batch": inference(net, video), "onnx batch": _ort_inference(session, video_np)}
        if g.batch > 1:
            cases |= {"torch one": inference(net, one), "onnx one": _ort_inference(session, one_np)}
        (logits,) = session.run(None, {"video": video_np})
        with torch.no_grad():
            gap = float(np.abs(logits - net(video).numpy()).max())
        t: dict[str, Timing] = interleaved(cases, rounds=rounds, warmup=1)
        single = ("torch one", "onnx one") if g.batch > 1 else ("torch batch", "onnx batch")
        case = f"inference fp32, {label}: {g.describe()}"
        rows += [
            rate_row(SECTION, case, g.batch, "ONNX Runtime", t["onnx batch"], "PyTorch eager", t["torch batch"]),
            time_row(SECTION, f"{case.replace(f'batch {g.batch}', 'batch 1')}, logits differ by at most {gap:.1e}",
                     "ms per clip", "ONNX Runtime", t[single[1]], "PyTorch eager", t[single[0]]),
        ]
    return rows
