"""The decoders (decord, PyAV, torchcodec) return exactly the frames asked for, agree on their
pixels, and the toolkit trains and predicts without decord.

Each test video carries its frame index in its pixels: 16 bits, one 16 x 16 block each
(black 0, white 1) along the top 32 rows, above a smooth picture that moves from frame to
frame. H.264 at crf 18 and MPEG-4 at 4 bits per pixel keep every block readable.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from dna_video.data import SyntheticSmarthome, decoders
from dna_video.data.decoders import DECODERS, DecoderUnavailableError, decoder_problem, open_reader, resolve_decoder
from dna_video.data.video import VideoDecodeError, probe_video, read_frames, write_video

REPO = Path(__file__).resolve().parents[1]
H, W, BLOCK, BITS = 96, 128, 16, 16
CODED_ROWS = 2 * BLOCK  # rows holding the index; the picture below them is compared across decoders
N = 50  # frames per file: 4 GOPs of 16 (the last one short)


def coded_frame(i: int) -> np.ndarray:
    """Frame ``i``: its index in black/white blocks on top of a picture that moves with i."""
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    img = np.stack([60 + 100 * xx / W, 60 + 100 * yy / H, 120 + 80 * np.sin(2 * np.pi * (xx / W + i / N))], -1)
    for bit in range(BITS):
        row, col = divmod(bit, W // BLOCK)
        img[row * BLOCK:(row + 1) * BLOCK, col * BLOCK:(col + 1) * BLOCK] = 235 if (i >> bit) & 1 else 16
    return np.clip(img, 0, 255).astype(np.uint8)


def frame_index(frame: np.ndarray) -> int:
    """The index coded in a decoded frame (each block's centre against mid-grey)."""
    value = 0
    for bit in range(BITS):
        row, col = divmod(bit, W // BLOCK)
        block = frame[row * BLOCK + 4:(row + 1) * BLOCK - 4, col * BLOCK + 4:(col + 1) * BLOCK - 4]
        value |= int(block.mean() > 128) << bit
    return value


def _write_with_pyav(path: Path, options: dict[str, str], timestamps_ms: list[int] | None = None) -> None:
    """H.264 with x264 ``options`` (e.g. B-frames); ``timestamps_ms``: a variable frame rate."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        stream.codec_context.gop_size = 16
        stream.codec_context.options = {"crf": "18", "preset": "veryfast", **options}
        if timestamps_ms:
            stream.time_base = stream.codec_context.time_base = Fraction(1, 1000)
        for i in range(N):
            frame = av.VideoFrame.from_ndarray(coded_frame(i), format="rgb24")
            if timestamps_ms:
                frame.pts, frame.time_base = timestamps_ms[i], Fraction(1, 1000)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


@pytest.fixture(scope="session")
def videos(tmp_path_factory) -> dict[str, Path]:
    """kind -> file: H.264 mp4 (the toolkit's writer: keyframe every 16, no B-frames), MPEG-4
    Part 2 AVI (NTU RGB+D's format), H.264 with B-frames (decode order is not presentation
    order), and H.264 at a variable frame rate (gaps of 20 and 70 ms)."""
    root = tmp_path_factory.mktemp("decoders")
    frames = np.stack([coded_frame(i) for i in range(N)])
    files = {kind: root / name for kind, name in
             [("mp4", "cfr.mp4"), ("avi", "ntu.avi"), ("bframes", "bframes.mp4"), ("vfr", "vfr.mp4")]}
    write_video(str(files["mp4"]), frames, gop=16)
    write_video(str(files["avi"]), frames, codec="mpeg4", gop=16)
    _write_with_pyav(files["bframes"], {"bf": "3"})
    _write_with_pyav(files["vfr"], {"bf": "0"}, list(np.cumsum([0] + [70 if i % 3 == 0 else 20 for i in range(1, N)])))
    with av.open(str(files["bframes"])) as container:  # the file really reorders frames
        assert any(p.pts != p.dts for p in container.demux(container.streams.video[0]) if p.size)
    return files


def _decoder_param(name: str):
    problem = decoder_problem(name)
    return pytest.param(name, marks=pytest.mark.skipif(problem is not None, reason=problem or ""))


ALL = [_decoder_param(name) for name in DECODERS]
# Unsorted, repeated, both ends, across GOP borders (15 | 16, 31 | 32), the last frame twice.
WANTED = [N - 1, 3, 3, 17, 0, 16, 15, N - 2, 31, 32, 33, 47, N - 1]


@pytest.mark.parametrize("kind", ["mp4", "avi", "bframes", "vfr"])
@pytest.mark.parametrize("decoder", ALL)
def test_every_decoder_returns_exactly_the_requested_frames(videos, decoder, kind):
    with open_reader(str(videos[kind]), decoder) as reader:
        assert reader.num_frames == N
        assert reader.size == (H, W)
        if kind != "vfr":
            assert reader.fps == pytest.approx(30.0)
        frames = reader.get(WANTED)
    assert frames.shape == (len(WANTED), H, W, 3) and frames.dtype == np.uint8
    assert [frame_index(f) for f in frames] == WANTED
    # What the datasets call: the sampler's layout kept, each index decoded once.
    layout = np.array([[N - 1, 0, 5], [5, 17, 16]])
    decoded = read_frames(str(videos[kind]), lambda n, fps: layout, decoder)
    assert [frame_index(f) for f in decoded.frames] == layout.reshape(-1).tolist()
    assert decoded.num_frames == N and not decoded.decoded_by_pyav
    assert probe_video(str(videos[kind]), decoder) == (reader.num_frames, reader.fps)


@pytest.mark.parametrize("kind", ["mp4", "avi", "bframes", "vfr"])
def test_decoders_agree_within_two_levels(videos, kind):
    available = [name for name in DECODERS if decoder_problem(name) is None]
    assert {"decord", "pyav"} <= set(available)
    frames, rates = {}, {}
    for name in available:
        with open_reader(str(videos[kind]), name) as reader:
            frames[name] = reader.get(WANTED).astype(np.int16)
            rates[name] = reader.fps
    assert max(rates.values()) == pytest.approx(min(rates.values())), rates  # the average rate, also for vfr
    reference = frames["decord"]
    for name, got in frames.items():
        # The picture under the coded rows (measured: identical, 0 levels apart, on all four
        # files: the three decoders convert YUV 4:2:0 to RGB with the same FFmpeg routine).
        assert np.abs(got[:, CODED_ROWS:] - reference[:, CODED_ROWS:]).max() <= 2, name
        assert np.abs(got - reference).max() <= 2, name


@pytest.mark.parametrize("decoder", ALL)
def test_a_file_that_is_not_a_video_is_named_by_every_decoder(tmp_path, decoder):
    text = tmp_path / "notes.mp4"
    text.write_text("hello this is text")
    with pytest.raises(VideoDecodeError) as caught:
        read_frames(str(text), lambda n, fps: np.arange(n), decoder)
    assert caught.value.path == str(text)
    assert caught.value.reason == "not a video (18 bytes, starts with 'hello this is te')"


def test_a_decoder_that_cannot_run_stops_with_what_to_do(monkeypatch, videos):
    monkeypatch.setitem(sys.modules, "torchcodec", None)  # as where it is not installed
    monkeypatch.setattr(decoders, "_PROBLEMS", {})
    with pytest.raises(DecoderUnavailableError, match=r"decoder 'torchcodec': torchcodec is not installed .*"
                                                      + re.escape(f"{sys.executable} -m pip install -c constraints.txt -e '.[torchcodec]'")):
        resolve_decoder("torchcodec")
    with pytest.raises(ValueError, match="decoder 'opencv': choose one of decord, pyav, torchcodec"):
        resolve_decoder("opencv")
    # Installed, but FFmpeg's shared libraries are missing (torchcodec then states no FFmpeg version).
    monkeypatch.setitem(sys.modules, "torchcodec", types.SimpleNamespace(ffmpeg_major_version=None))
    monkeypatch.setattr(decoders, "_PROBLEMS", {})
    with pytest.raises(DecoderUnavailableError, match="torchcodec cannot load FFmpeg: it needs FFmpeg's shared"):
        resolve_decoder("torchcodec")
    monkeypatch.setitem(sys.modules, "torchcodec", None)
    monkeypatch.setattr(decoders, "_PROBLEMS", {})
    # The DataModule refuses it when built, before any run folder exists.
    with pytest.raises(DecoderUnavailableError, match="torchcodec is not installed"):
        SyntheticSmarthome(root=str(videos["mp4"].parent), decoder="torchcodec")
    # decord where it does not import: PyAV, said once per process.
    monkeypatch.setitem(sys.modules, "decord", None)
    monkeypatch.setattr(decoders, "_said_fallback", False)
    assert resolve_decoder("decord") == "pyav" and resolve_decoder("decord") == "pyav"
    data = SyntheticSmarthome(root=str(videos["mp4"].parent), decoder="decord")
    assert data.decoder == "pyav" and data.hparams.decoder == "decord"  # the user's choice is what is saved


def test_predict_and_analyze_take_the_checkpoints_decoder_unless_told_otherwise():
    from dna_video.prediction.torch_backend import _settings_from_arguments
    from dna_video.tools.predict import parser as _parser
    from dna_video.tools.predict import settings_overrides

    assert _settings_from_arguments({}).decoder == "decord"  # a checkpoint from before the option
    saved = _settings_from_arguments({"decoder": "torchcodec", "test_num_crops": 1})
    assert saved.decoder == "torchcodec"
    args = _parser().parse_args(["model.ckpt", "clip.mp4", "--decoder", "pyav"])
    assert saved.replace(**settings_overrides(args)).decoder == "pyav"
    assert saved.replace(**settings_overrides(_parser().parse_args(["model.ckpt", "clip.mp4"]))).decoder == "torchcodec"


def test_the_datamodule_passes_its_decoder_to_every_split(synthetic_root):
    data = SyntheticSmarthome(root=str(synthetic_root), decoder="pyav", num_workers=0, num_frames=4)
    data.setup("fit")
    assert {split: ds.decoder for split, ds in data.datasets.items()} == {"train": "pyav", "val": "pyav"}
    assert data.datasets["train"][0]["video"].shape[1] == 4
    assert data.hparams.decoder == "pyav"


# With decord blocked (as on a platform without its wheels): a tiny fit, then predict on its
# checkpoint, in one process (their imports are most of the time). Each command says once
# that PyAV decodes; the process-wide "said" flag is reset between the two commands.
WITHOUT_DECORD = """
import logging, sys
sys.modules["decord"] = None
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # one handler for both
from run_helpers import tiny_run_args
from dna_video.data import SyntheticSmarthome, decoders
from dna_video.training.cli import main as cli
from dna_video.tools.predict import main as predict

root, logs, video = sys.argv[1:4]
cli(["fit", *tiny_run_args(root, logs, "--data.init_args.val_num_crops=1", "--model.schedule.warmup_steps=0",
     "--trainer.num_sanity_val_steps=0", "--trainer.max_epochs=1", "--trainer.limit_train_batches=1",
     "--trainer.limit_val_batches=1", "--test_after_fit=false", "--trainer.logger.init_args.name=exp")])
decoders._said_fallback = False
print("predict exit", predict([f"{logs}/exp/version_0/checkpoints/last.ckpt", video, "--top-k", "2"]))
print("decord imported:", sys.modules["decord"] is not None)
"""


@pytest.mark.slow
def test_without_decord_fit_and_predict_decode_with_pyav(synthetic_root, tmp_path):
    video = next(iter(sorted(synthetic_root.rglob("*.mp4"))))
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'tests'}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", WITHOUT_DECORD, str(synthetic_root), str(tmp_path), str(video)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    said = [line for line in run.stderr.splitlines() if "decoding videos with PyAV" in line]
    assert said == ["INFO dna_video.data.decoders: decord is not available here (import of decord halted; "
                    "None in sys.modules): decoding videos with PyAV"] * 2, run.stderr[-3000:]
    assert "predict exit 0" in run.stdout and "decord imported: False" in run.stdout
    assert video.name in run.stdout  # its prediction row
    checkpoint = torch.load(tmp_path / "exp" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["datamodule_hyper_parameters"]["decoder"] == "decord"
