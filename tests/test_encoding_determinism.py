"""Generated datasets are a function of their options: the same frames encoded by
`write_video` in processes running side by side give the same bytes. (x264 with its
macroblock-tree lookahead wrote different bytes in about 1 of 6 such processes, which made the
denoising experiment's `--jobs 1` and `--jobs 2` rows differ.)

The side-by-side test rarely sees that bug come back (threads and lookahead planted back on: 0
of 26 runs of 4 to 6 processes, with or without torch and Lightning imported), so the settings
that prevent it are read back from the file too: x264 writes its options into the stream."""

import hashlib
import subprocess
import sys

import pytest

from dna_video.data.scenes import render_scene
from dna_video.data.video import write_video

SCRIPT = """
import hashlib, os, tempfile
from dna_video.data.scenes import render_scene
from dna_video.data.video import write_video
digest = hashlib.sha256()
folder = tempfile.mkdtemp()
for i in range(12):
    frames, _ = render_scene(i % 5, 1000 + i, level="cue", num_distractors=1, similarity=0.0, height=48, width=64)
    path = os.path.join(folder, f"{i}.mp4")
    write_video(path, frames)
    digest.update(open(path, "rb").read())
print(digest.hexdigest())
"""


@pytest.mark.slow
def test_concurrent_encodes_write_the_same_bytes():
    processes = [subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
                 for _ in range(4)]
    digests = [p.communicate(timeout=120)[0].strip() for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert len(set(digests)) == 1, digests
    assert len(digests[0]) == len(hashlib.sha256().hexdigest())


def _x264_options(path) -> dict[str, str]:
    """The encoder settings x264 records in its SEI message (``options: key=value ...``)."""
    data = path.read_bytes()
    start = data.find(b"options: ")
    assert start >= 0, f"{path}: no x264 options message"
    text = data[start + len(b"options: "):].split(b"\x00")[0].decode("ascii", "replace")
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def test_x264_encodes_with_one_thread_and_no_lookahead(tmp_path):
    frames, _ = render_scene(2, 7, level="cue", num_distractors=1, height=96, width=128)
    path = tmp_path / "clip.mp4"
    write_video(path, frames)
    options = _x264_options(path)
    assert options["threads"] == "1" and options["lookahead_threads"] == "1", options
    assert options["sliced_threads"] == "0" and options["mbtree"] == "0", options
    assert options.get("rc_lookahead", "0") == "0", options
