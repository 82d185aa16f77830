"""``dna-video predict MODEL.onnx`` (dna_video.prediction.onnx_backend, dna_video.tools.predict): the tiny model
trained in the tests (conftest's ``tiny_checkpoint``: dark vs bright clips, 4 frames 2 apart, 3 crops
of 32) exported once, then run on ONNX Runtime in a process where importing torch fails, on single
videos and on a long one (timeline); its answers against the PyTorch ``predict``'s.

Tolerances, and why:

* preprocessing: Pillow's resize against torchvision's (antialiased bilinear, the same filter,
  rounded differently): pixels within 1 level of 255, so normalised values within 1 / (255 x
  std); where the frame is not resized (already the crop's size) the two are equal (1e-6);
* probabilities: that preprocessing gap through the network, plus ONNX Runtime against PyTorch
  (about 1e-7 on this model, ``tests/test_export.py``): within 2e-3 (measured: below 1e-3);
* top-1: the issue asks for 99% agreement on the quickstart model's 210 test videos; that is
  measured by hand (docs/deploy.md). Here the tiny model on 20 new class videos
  (``analysis_trees.write_class_videos``) must agree on at least 99% of them, i.e. all.
"""

from __future__ import annotations

import ast
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis_trees import CLASSES, write_class_videos
from dna_video.data.transforms import EvalClipTransform
from dna_video.prediction.onnx_backend import providers_for
from dna_video.prediction.views import clip_views, resized_size
from dna_video.tasks.views import mean_view_probs

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

REPO = Path(__file__).resolve().parents[1]
PROB_TOLERANCE = 2e-3

# Runs the command line with torch made unimportable: `import torch` anywhere raises.
NO_TORCH = """
import sys
sys.modules["torch"] = None
from dna_video.__main__ import main
try:
    main(sys.argv[1:])
finally:
    stray = sorted(m for m in sys.modules if m.split(".")[0] in ("torchvision", "lightning", "einops"))
    if stray:
        print("imported:", stray, file=sys.stderr)
"""


def without_torch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="session")
def onnx_model(tiny_checkpoint, tmp_path_factory) -> Path:
    from dna_video.tools.export import main as export

    out = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    assert export(["onnx", str(tiny_checkpoint[0]), str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def class_videos(tmp_path_factory) -> Path:
    """20 new videos of the tiny model's classes (10 dark, 10 bright) in a list file with labels."""
    root = tmp_path_factory.mktemp("class_videos")
    videos = write_class_videos(root / "videos", 10, seed=11)
    listing = root / "videos.txt"
    listing.write_text("".join(f"{path.relative_to(root)} {label}\n" for path, label in videos))
    return listing


# -- what the runtime imports --------------------------------------------------------------------

TORCH_FREE = ["dna_video.prediction.onnx_backend", "dna_video.tools.predict", "dna_video.__main__"]
TORCH_WORLD = {"torch", "torchvision", "lightning", "pytorch_lightning", "torchmetrics", "einops", "timm",
               "pytorchvideo"}


def _module_imports(module: str) -> set[str]:
    """Modules ``module`` imports when it is imported: its top-level statements (not function
    bodies), resolved to the package's modules or to top-level names outside it."""
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = REPO / module.replace(".", "/") / "__init__.py"
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    name = f"{base}.{alias.name}"
                    exists = (REPO / (name.replace(".", "/") + ".py")).is_file() or (REPO / name.replace(".", "/")).is_dir()
                    found.add(name if name.startswith("dna_video") and exists else base)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []) +
                      [s for h in getattr(node, "handlers", []) for s in h.body])

    visit(ast.parse(path.read_text()).body)
    return found


def test_the_runtime_modules_import_no_torch():
    """Statically: importing the ONNX ``predict`` (and the packages above each module) reaches
    no torch, Lightning or einops; the commands below run where importing torch fails."""
    seen, todo, outside = set(), list(TORCH_FREE), {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages are imported first
        for name in _module_imports(module):
            if name.split(".")[0] == "dna_video":
                todo.append(name)
            else:
                outside.setdefault(name.split(".")[0], set()).add(module)
    assert "dna_video.prediction.timeline" in seen and "dna_video.prediction.stream" in seen
    assert not {k: sorted(v) for k, v in outside.items() if k in TORCH_WORLD}


# -- preprocessing and aggregation (no model) ----------------------------------------------------


@pytest.mark.parametrize("height,width", [(48, 64), (64, 48), (240, 320), (30, 40), (32, 50)])
@pytest.mark.parametrize("crops", [1, 3])
def test_numpy_views_match_the_torch_evaluation_transform(height, width, crops):
    rng = np.random.default_rng(height * width + crops)
    frames = rng.integers(0, 256, (4, height, width, 3), dtype=np.uint8)
    mean, std = (0.45, 0.4, 0.5), (0.225, 0.25, 0.2)
    expected = EvalClipTransform(32, crops, mean, std)(torch.from_numpy(frames).permute(0, 3, 1, 2)).numpy()
    views = clip_views(frames, 32, crops, mean, std)
    assert views.shape == expected.shape and views.dtype == np.float32
    gap = np.abs(views - expected)
    if min(height, width) == 32:  # not resized: the same numbers
        assert gap.max() < 1e-6
    else:  # one level of 255 at most, in a few pixels
        assert gap.max() <= 1 / (255 * min(std)) + 1e-5
        assert (gap > 1e-5).mean() < 0.05


def test_resized_size_follows_torchvision():
    from torchvision.transforms import v2

    for height, width in [(48, 64), (64, 48), (240, 320), (31, 97), (97, 31), (224, 224)]:
        resized = v2.Resize(32, antialias=True)(torch.zeros(1, 3, height, width, dtype=torch.uint8))
        assert resized_size(height, width, 32) == tuple(resized.shape[-2:])


@pytest.mark.parametrize("on", ["logits", "probs"])
def test_views_combine_as_evaluation_does(on):
    logits = np.random.default_rng(0).normal(0, 3, (4, 6, 5)).astype(np.float32)
    expected = mean_view_probs(torch.from_numpy(logits), on).numpy()
    np.testing.assert_allclose(mean_view_probs(logits, on), expected, rtol=0, atol=1e-6)


def test_device_picks_the_provider_onnx_runtime_has():
    from dna_video.prediction.onnx_backend import OnnxModelError

    assert providers_for(None, ["CPUExecutionProvider"])[0] == ["CPUExecutionProvider"]
    assert providers_for(None, ["CUDAExecutionProvider", "CPUExecutionProvider"])[0][0] == "CUDAExecutionProvider"
    assert providers_for("cuda:1", ["CUDAExecutionProvider"])[1] == {"device_id": 1}
    with pytest.raises(OnnxModelError, match="no CUDA provider.*onnxruntime-gpu"):
        providers_for("cuda", ["CPUExecutionProvider"])
    with pytest.raises(OnnxModelError, match="cpu, cuda or cuda:N"):
        providers_for("mps", ["CPUExecutionProvider"])


# -- the command, without torch ------------------------------------------------------------------


@pytest.mark.slow
def test_single_videos_without_torch_agree_with_pytorch(tiny_checkpoint, onnx_model, class_videos, tmp_path, capsys):
    from dna_video.tools.predict import main as torch_predict

    broken = tmp_path / "broken.mp4"
    broken.write_text("not a video")
    assert torch_predict([str(tiny_checkpoint[0]), str(class_videos), "--out", str(tmp_path / "torch.json")]) == 0
    assert torch_predict([str(tiny_checkpoint[0]), str(class_videos), "--out", str(tmp_path / "torch.csv")]) == 0
    capsys.readouterr()
    for suffix in ("json", "csv"):
        run = without_torch("predict", str(onnx_model), str(class_videos), str(broken), "--out",
                            str(tmp_path / f"onnx.{suffix}"))
        assert run.returncode == 0, run.stderr
        assert "imported:" not in run.stderr and "Traceback" not in run.stderr, run.stderr
        assert f"cannot read {broken}: not a video" in run.stderr  # named, the others still answered
        assert "1 of 21 videos could not be read" in run.stderr
    assert "Bright" in run.stdout and "wrote 20 predictions" in run.stdout

    ours = json.loads((tmp_path / "onnx.json").read_text())
    theirs = json.loads((tmp_path / "torch.json").read_text())
    assert ours["class_names"] == theirs["class_names"] == CLASSES
    assert ours["settings"] == {**theirs["settings"]}  # the checkpoint's evaluation settings, from the file
    assert [f["path"] for f in ours["failed"]] == [str(broken)]
    pairs = list(zip(ours["predictions"], theirs["predictions"], strict=True))
    agree = sum(a["pred"] == b["pred"] for a, b in pairs)
    assert agree >= 0.99 * len(pairs)  # 20 videos: every one
    for a, b in pairs:
        assert a["path"] == b["path"] and a["label"] == b["label"]
        assert [c["name"] for c in a["top_k"]] == [c["name"] for c in b["top_k"]]
        np.testing.assert_allclose([c["prob"] for c in a["top_k"]], [c["prob"] for c in b["top_k"]],
                                   rtol=0, atol=PROB_TOLERANCE)
        assert (a["frames"], a["frames_needed"]) == (b["frames"], b["frames_needed"])
    assert sum(a["pred"] == a["label"] for a, _ in pairs) == len(pairs)  # and the model is right

    with open(tmp_path / "onnx.csv") as f_ours, open(tmp_path / "torch.csv") as f_theirs:
        rows, reference = list(csv.DictReader(f_ours)), list(csv.DictReader(f_theirs))
    assert rows and list(rows[0]) == list(reference[0])  # the same columns
    for a, b in zip(rows, reference, strict=True):
        assert (a["path"], a["label"], a["pred"], a["pred_name"]) == (b["path"], b["label"], b["pred"], b["pred_name"])
        assert abs(float(a["prob"]) - float(b["prob"])) <= PROB_TOLERANCE


@pytest.mark.slow
def test_timeline_without_torch_agrees_with_pytorch(tiny_checkpoint, onnx_model, tmp_path):
    from test_timeline import TRUTH, write_long

    from dna_video.tools.predict import main as torch_predict

    video = write_long(tmp_path / "kitchen.mp4")
    options = ["--timeline", "--stride", "8f", "--smooth", "3", "--top-k", "2"]
    assert torch_predict([str(tiny_checkpoint[0]), str(video), *options, "--out", str(tmp_path / "torch")]) == 0
    run = without_torch("predict", str(onnx_model), str(video), *options, "--out", str(tmp_path / "onnx"))
    assert run.returncode == 0, run.stderr
    assert "imported:" not in run.stderr and "s of video per second" in run.stdout

    ours = json.loads((tmp_path / "onnx" / "kitchen_segments.json").read_text())
    theirs = json.loads((tmp_path / "torch" / "kitchen_segments.json").read_text())
    assert ours["checkpoint"] == str(onnx_model)
    for key in ("fps", "frames", "window_s", "stride_s", "windows", "decoding"):
        assert ours[key] == theirs[key], key
    assert [(s["name"], s["start_s"], s["end_s"]) for s in ours["segments"]] == [
        (s["name"], s["start_s"], s["end_s"]) for s in theirs["segments"]]
    assert [s["name"] for s in ours["segments"]] == [CLASSES[label] for label, _, _ in TRUTH]
    for a, b in zip(ours["segments"], theirs["segments"]):
        assert abs(a["prob"] - b["prob"]) <= PROB_TOLERANCE
    with open(tmp_path / "onnx" / "kitchen_windows.csv") as f_ours, open(tmp_path / "torch" / "kitchen_windows.csv") as f_theirs:
        rows, reference = list(csv.DictReader(f_ours)), list(csv.DictReader(f_theirs))
    assert len(rows) == len(reference) > 30
    for a, b in zip(rows, reference):
        assert (a["start_s"], a["end_s"], a["top1"]) == (b["start_s"], b["end_s"], b["top1"])
        assert abs(float(a["top1_prob"]) - float(b["top1_prob"])) <= PROB_TOLERANCE
    assert (tmp_path / "onnx" / "kitchen.srt").read_text().count(" --> ") == len(TRUTH)
    assert (tmp_path / "onnx" / "kitchen_timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_stream_without_torch_agrees_with_pytorch(tiny_checkpoint, onnx_model, tmp_path):
    """``predict MODEL.onnx SOURCE --stream --annotate`` where torch cannot be imported: every
    window of the file's timeline (88 frames: 21 windows, no tail), each within the tolerance
    of the PyTorch timeline's, and the annotated copy holds every frame."""
    import av

    from dna_video.prediction.timeline import video_timeline
    from dna_video.prediction.torch_backend import load_model
    from dna_video.data.video import write_video
    from test_timeline import FPS, long_frames

    video = tmp_path / "hall.mp4"
    write_video(str(video), long_frames([(0, 0, 30), (1, 30, 60), (0, 60, 88)]), fps=FPS)
    run = without_torch("predict", str(onnx_model), str(video), "--stream", "--no-drop", "--speed", "0", "--annotate",
                        "--out", str(tmp_path / "onnx"))
    assert run.returncode == 0, run.stderr
    assert "imported:" not in run.stderr and "the source ended after 88 frames" in run.stdout
    reference = video_timeline(load_model(tiny_checkpoint[0]), str(video))
    with open(tmp_path / "onnx" / "hall_live.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["window"]) for r in rows] == list(range(len(reference.windows))) == list(range(21))
    for row, probs in zip(rows, reference.probs):
        assert row["top1"] == CLASSES[int(probs.argmax())]
        assert abs(float(row["top1_prob"]) - float(probs.max())) <= PROB_TOLERANCE
    with av.open(str(tmp_path / "onnx" / "hall_annotated.mp4")) as container:
        assert sum(1 for _ in container.decode(video=0)) == 88


# -- mistakes, each in one line ------------------------------------------------------------------


def test_options_an_onnx_model_cannot_honour_are_refused(onnx_model, class_videos, capsys):
    from dna_video.tools.predict import main

    with pytest.raises(SystemExit, match="--features is for a checkpoint"):
        main([str(onnx_model), str(class_videos), "--features", "f.npy"])
    with pytest.raises(SystemExit, match="--annotate-attention is for a checkpoint"):
        main([str(onnx_model), str(class_videos), "--timeline", "--annotate-attention"])
    with pytest.raises(SystemExit, match=r"--num-frames 8: tiny.onnx was exported for 4 frames of 32 x 32; export again"):
        main([str(onnx_model), str(class_videos), "--num-frames", "8"])
    # The frames and crop it was exported with are accepted; --clips, --crops, sampling can change.
    assert main([str(onnx_model), str(class_videos), "--num-frames", "4", "--crops", "1", "--clips", "2"]) == 0
    assert "wrote" not in capsys.readouterr().out


def test_an_onnx_file_without_our_metadata_is_named(onnx_model, class_videos, tmp_path):
    import onnx

    from dna_video.tools.predict import main

    model = onnx.load(str(onnx_model))
    del model.metadata_props[:]
    bare = tmp_path / "bare.onnx"
    onnx.save(model, str(bare))
    with pytest.raises(SystemExit, match=r"bare.onnx: no class_names, num_frames.* export the checkpoint with"):
        main([str(bare), str(class_videos)])
    (tmp_path / "junk.onnx").write_text("junk")
    with pytest.raises(SystemExit, match="junk.onnx: ONNX Runtime cannot load it"):
        main([str(tmp_path / "junk.onnx"), str(class_videos)])


def test_the_pytorch_predict_hands_an_onnx_model_to_the_runtime(onnx_model, class_videos, tmp_path):
    from dna_video.tools.predict import main

    out = tmp_path / "p.json"
    assert main([str(onnx_model), str(class_videos), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["runtime"] == "onnxruntime"
    upper = tmp_path / "TINY.ONNX"  # (review of issue 36) the suffix in capitals, as Windows users write it
    upper.write_bytes(onnx_model.read_bytes())
    assert main([str(upper), str(class_videos), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["runtime"] == "onnxruntime"
