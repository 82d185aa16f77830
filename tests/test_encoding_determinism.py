"""Generated datasets are a function of their options: the same frames encoded by
`write_video` in processes running side by side give the same bytes. (x264 with its
macroblock-tree lookahead wrote different bytes in about 1 of 6 such processes, which made the
denoising experiment's `--jobs 1` and `--jobs 2` rows differ.)"""

import hashlib
import subprocess
import sys

import pytest

SCRIPT = """
import hashlib, os, tempfile
from dna_video.data.distractors import render_scene
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
