"""One list of video suffixes (``dna_video/common/videofiles.py``): ``predict``'s folder search
and ``prepare videos``' scan take the same files, and no other module states a list of its own
(read statically, like tests/test_defaults.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from dna_video.common.videofiles import VIDEO_SUFFIXES, is_video_name
from dna_video.data.ntu_layout import NTU_SUFFIXES
from dna_video.prediction.videos import collect_videos
from dna_video.tools import prepare

PACKAGE = Path(__file__).resolve().parents[1] / "dna_video"
OWNER = "common/videofiles.py"
# A dataset's narrower rule, by (file, name): a part of the list, tested below.
NARROWER = {("data/ntu_layout.py", "NTU_SUFFIXES")}

# Written out here, not read from the list: the containers a user's folder may hold.
VIDEOS = ["a.mp4", "b.avi", "c.mkv", "d.mov", "e.webm", "f.m4v", "g.mpg", "h.mpeg", "i.wmv", "j.flv", "K.MP4",
          "sub/l.Avi", "sub/deeper/m.mp4"]
NOT_VIDEOS = ["notes.txt", "list.csv", "a.masks.npz", "README", "clip.mp4.partial", "sub/weights.ckpt", "x.jpg"]


def test_predict_and_prepare_take_the_same_videos_of_a_folder(tmp_path):
    for name in VIDEOS + NOT_VIDEOS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "folder.mp4").mkdir()  # a folder with a video's name is no video
    want = sorted(str(tmp_path / name) for name in VIDEOS)
    predicted = sorted(path for path, _ in collect_videos([str(tmp_path)]))
    scanned, reports = prepare.scan("videos", str(tmp_path))
    assert predicted == want
    assert sorted(map(str, scanned)) == want and reports == {}


def test_the_list_is_lower_case_suffixes_and_the_datasets_rules_are_parts_of_it():
    assert all(s.startswith(".") and s == s.lower() for s in VIDEO_SUFFIXES)
    assert set(NTU_SUFFIXES) <= VIDEO_SUFFIXES and ".mp4" in VIDEO_SUFFIXES  # Toyota Smarthome: .mp4
    assert is_video_name("X/CLIP.MkV") and not is_video_name("clip.mp4.txt") and not is_video_name(".mp4x")


def _suffix_lists(tree: ast.Module, name: str) -> list[tuple[int, list[str]]]:
    """(line, strings) of every set, tuple or list literal of two or more strings, all of them video
    suffixes, in module ``name``, except the values of its NARROWER names' assignments."""
    narrower = {n for module, n in NARROWER if module == name}
    allowed = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               for target in node.targets if isinstance(target, ast.Name) and target.id in narrower}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)) and id(node) not in allowed:
            strings = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(strings) >= 2 and len(strings) == len(node.elts) and all(s.lower() in VIDEO_SUFFIXES for s in strings):
                found.append((node.lineno, strings))
    return found


def test_no_module_states_its_own_list_of_video_suffixes():
    stated = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == OWNER:
            continue
        for line, strings in _suffix_lists(ast.parse(path.read_text(), str(path)), name):
            stated.append(f"dna_video/{name}:{line}: {strings}")
    assert not stated, ("video suffixes stated outside dna_video/common/videofiles.py (import VIDEO_SUFFIXES or "
                        "is_video_name from there):\n" + "\n".join(stated))
