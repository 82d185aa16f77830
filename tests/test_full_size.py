"""The code that grows with the dataset, at the real datasets' size where it costs nothing (names
only, no files) and on a few hundred real files otherwise (the benchmark's ``scale`` section runs
the same code on the full trees: benchmarks/README.md, "Full-size datasets").

Expectations come from the datasets' published facts and from simple per-name code written
here, not from the code under test.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.full_size import full_size_tree, ntu_names, smarthome_names
from dna_video.data.ntu_layout import PROTOCOLS as NTU_PROTOCOLS
from dna_video.data.ntu_layout import ntu_catalog, parse_ntu_name, parse_ntu_names
from dna_video.data.records import RecordTable, VideoRecord, list_files, missing_files
from dna_video.data.smarthome_layout import PROTOCOLS as SMARTHOME_PROTOCOLS
from dna_video.data.smarthome_layout import smarthome_catalog

# Published split sizes (datasets.md): protocol -> (train, val, test).
NTU_COUNTS = {"cs": (40320, None, 16560), "cv": (37920, None, 18960)}
SMARTHOME_COUNTS = {"cs": (8829, 1853, 5433), "cv1": (1877, 3539, 1901), "cv2": (7806, 3539, 1901)}
NTU_CS_TRAIN = {1, 2, 4, 5, 8, 9, 13, 14, 15, 16, 17, 18, 19, 25, 27, 28, 31, 34, 35, 38}
NTU_NAME = re.compile(r"S(\d{3})C(\d{3})P(\d{3})R(\d{3})A(\d{3})(?:_rgb)?\.(?:avi|mp4)", re.ASCII)


def sizes(catalog):
    records = catalog.records
    return tuple(len(records[s]) if s in records else None for s in ("train", "val", "test"))


def test_the_benchmark_name_lists_hold_the_real_split_sizes():
    names = ntu_names()
    assert len(names) == len(set(names)) == 56880
    for protocol, counts in NTU_COUNTS.items():
        catalog = ntu_catalog([f"/ntu/{n}" for n in names], NTU_PROTOCOLS[protocol])
        assert sizes(catalog)[::2] == counts[::2] and catalog.excluded_counts() == {}
    train = [n for n in names if int(NTU_NAME.fullmatch(n)[3]) in NTU_CS_TRAIN]
    assert len(train) == 40320  # counted here by name, not by the catalog
    names = smarthome_names()
    assert len(names) == len(set(names)) == 16115 + 14
    for protocol, counts in SMARTHOME_COUNTS.items():
        assert sizes(smarthome_catalog([f"/s/{n}" for n in names], SMARTHOME_PROTOCOLS[protocol])) == counts
    assert sum(n.startswith("Pour.Fromcup_") for n in names) == 14
    assert sum(n.startswith("Walk_") for n in names) == 4070 and sum(n.startswith("Cutbread_") for n in names) == 45
    on_c05 = {n.split("_")[0] for n in names if n.endswith("_c05.mp4")}
    assert not on_c05 & {"Cutbread", "Eat.Attable"}


@pytest.mark.slow
@pytest.mark.parametrize("dataset, every", [("ntu60", 200), ("toyota_smarthome", 50)])
def test_a_few_hundred_real_files_of_the_benchmark_tree_set_up_and_scan_as_their_names_say(tmp_path, dataset, every):
    from dna_video.data.ntu import NTURGBD60
    from dna_video.data.smarthome import ToyotaSmarthome
    from dna_video.data.video import read_frames
    from dna_video.tools.prepare import scan

    root = full_size_tree(tmp_path, dataset, every=every)
    names = sorted(os.listdir(root))
    assert len(names) == len((ntu_names if dataset == "ntu60" else smarthome_names)()[::every])
    assert len({os.stat(root / n).st_ino for n in names}) == 1  # one file under every name
    frames = read_frames(str(root / names[0]), lambda n, fps: np.arange(n))
    assert frames.num_frames == 48 and frames.frames.shape[1:] == (24, 32, 3)
    if dataset == "ntu60":
        dm = NTURGBD60(str(root), protocol="cs", num_workers=0)
        expected = {"train": [n for n in names if int(n[9:12]) in NTU_CS_TRAIN]}
        expected["test"] = [n for n in names if int(n[9:12]) not in NTU_CS_TRAIN]
        labels = {n: int(n[17:20]) - 1 for n in names}
    else:
        dm = ToyotaSmarthome(str(root), protocol="cs", num_workers=0)
        classes = dm.class_names
        subjects = {"train": {3, 4, 6, 7, 9, 12, 13, 15, 17}, "val": {19, 25}, "test": {2, 10, 11, 14, 16, 18, 20}}
        expected = {split: [n for n in names if int(n.split("_p")[1][:2]) in subjects[split]
                            and n.split("_")[0] in classes] for split in subjects}
        labels = {n: classes.index(n.split("_")[0]) for n in names if n.split("_")[0] in classes}
    dm.setup("fit")
    dm.setup("test")
    for split, wanted in expected.items():
        records = dm.datasets[split].records
        assert [Path(p).name for p in records.paths] == wanted, split
        assert records.labels.tolist() == [labels[n] for n in wanted], split
    files, reports = scan(dataset, str(root))
    assert [f.name for f in files] == names  # Pour.Fromcup too: a video of the copy, outside the classes
    assert reports["cs"]["splits"]["train"]["videos"] == len(expected["train"])


def test_the_array_parse_of_ntu_names_accepts_exactly_what_the_pattern_accepts():
    good = "S001C002P003R002A013"
    names = [good + s for s in ("_rgb.avi", ".avi", "_rgb.mp4", ".mp4", "_rgb.mkv", "_RGB.avi", "_rgb.avi.bak",
                                "_rgb.avi\n", "_rgbavi", "")]
    names += ["X001C002P003R002A013.avi", "S01C002P003R002A013.avi", "S001C002P003R002A0134.avi",
              "S00aC002P003R002A013.avi", "S001C002P003R002A01٣.avi", "s001C002P003R002A013.avi", "S001C002P003R002A013",
              "SS001C002P003R002A013.avi", "S999C999P999R999A999_rgb.mp4", "S000C000P000R000A000.avi", ".avi", ""]
    parsed, fields = parse_ntu_names(names)
    for name, ok, row in zip(names, parsed, fields):
        m = NTU_NAME.fullmatch(name)
        assert bool(ok) == (m is not None), repr(name)
        assert (parse_ntu_name(name) is not None) == (m is not None), repr(name)
        if m is not None:
            assert row.tolist() == [int(g) for g in m.groups()], name


def test_the_validation_split_holds_out_the_same_performances_as_the_draw_per_performance():
    """``val_fraction``: per action, round(fraction x performances) drawn from the sorted
    (setup, performer, replication) tuples, actions in order: written here per name."""
    names = ntu_names()
    catalog = ntu_catalog([f"/ntu/{n}" for n in names], NTU_PROTOCOLS["cs"], val_fraction=0.1, val_seed=3)
    rng = np.random.default_rng(3)
    by_action = {}
    for n in names:
        s, c, p, r, a = (int(g) for g in NTU_NAME.fullmatch(n).groups())
        if p in NTU_CS_TRAIN:
            by_action.setdefault(a, set()).add((s, p, r))
    held = set()
    for action in sorted(by_action):
        performances = sorted(by_action[action])
        held |= {(*performances[i], action) for i in rng.permutation(len(performances))[: round(0.1 * len(performances))]}
    val = {(int(m[1]), int(m[3]), int(m[4]), int(m[5])) for m in (NTU_NAME.fullmatch(Path(p).name)
                                                                 for p in catalog.records["val"].paths)}
    assert val == held and len(catalog.records["val"]) == 3 * len(held)  # every camera of a performance
    assert len(catalog.records["train"]) + len(catalog.records["val"]) == 40320


def test_a_record_table_keeps_paths_and_labels_as_arrays():
    paths = ["/a/b.mp4", "/a/ü name.mp4", os.fsdecode(b"/a/\xff.mp4"), "/c.avi"]  # non-UTF-8 bytes survive
    table = RecordTable(paths, [3, 1, 0, 2])
    assert list(table) == [VideoRecord(p, lbl) for p, lbl in zip(paths, [3, 1, 0, 2])]
    assert table.paths == paths and table.path(-1) == "/c.avi" and table[1] == VideoRecord(paths[1], 1)
    assert table.take([2, 0]).paths == [paths[2], paths[0]] and table[1:3] == [table[1], table[2]]
    assert table.take(table.labels > 1) == [table[0], table[3]]
    assert RecordTable.of(list(table)) == table and RecordTable.of(table) is table
    assert table + [VideoRecord("/x", 0)] == list(table) + [VideoRecord("/x", 0)]
    big = RecordTable([f"/data/ntu/S001C001P001R001A{i:06d}_rgb.avi" for i in range(56880)], np.zeros(56880))
    assert big.nbytes < 56880 * 60  # the bytes of the paths and two integers a video, no object per video


def test_a_dataset_in_a_worker_holds_no_object_per_video():
    """What a DataLoader worker reads of the dataset: no container with an entry per video (a
    list of records there is copied into every worker as the epoch touches it)."""
    from dna_video.data.dataset import VideoClipDataset
    from dna_video.data.sampling import FrameSampler

    dataset = VideoClipDataset([VideoRecord(f"/v/{i}.mp4", i % 5) for i in range(5000)], FrameSampler(), lambda x: x,
                               train=True)
    seen, todo = set(), [vars(dataset)]
    while todo:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, (list, tuple, set, dict)):
            assert len(value) < 100, f"a {type(value).__name__} of {len(value)} entries"
            todo += list(value.values() if isinstance(value, dict) else value)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            todo.append(vars(value))
        elif hasattr(value, "__slots__"):
            todo += [getattr(value, s) for s in value.__slots__ if hasattr(value, s)]
    assert isinstance(dataset.records, RecordTable) and len(dataset) == 5000


def test_listing_and_missing_files_with_one_listing_per_folder(tmp_path):
    for name in ("a/x.mp4", "a-b/x.mp4", "a/.hidden.mp4", "a/sub/y.mp4", "z.mp4", "real/w.mp4"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "linked").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "a" / "link.mp4").symlink_to(tmp_path / "z.mp4")
    (tmp_path / "a" / "broken.mp4").symlink_to(tmp_path / "nothing.mp4")
    # What the DataModules listed before (Path.rglob, sorted Paths): the same files, the same order.
    old = [str(p) for p in sorted(p for p in tmp_path.rglob("*") if not p.name.startswith(".") and not p.is_dir())]
    assert list_files(tmp_path) == old and any(p.endswith("a-b/x.mp4") for p in old)
    assert list_files(tmp_path / "a", recursive=False) == [str(tmp_path / "a" / n) for n in ("broken.mp4", "link.mp4", "x.mp4")]
    asked = [str(tmp_path / n) for n in ("a/x.mp4", "a/sub", "a/none.mp4", "a/link.mp4", "a/broken.mp4", "gone/v.mp4",
                                        "z.mp4")]
    assert missing_files(asked) == [str(tmp_path / n) for n in ("a/sub", "a/none.mp4", "a/broken.mp4", "gone/v.mp4")]


def test_the_prepare_scan_imports_neither_torch_nor_lightning(tmp_path):
    root = full_size_tree(tmp_path, "ntu60", every=500)
    probe = ("import sys; from dna_video.tools.prepare import scan; files, reports = scan('ntu60', sys.argv[1]); "
             "print(len(files), sorted(m for m in ('torch', 'lightning', 'pytorch_lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True, text=True, check=True).stdout
    assert out.split(maxsplit=1) == [str(len(os.listdir(root))), "[]\n"]


def test_the_scale_section_alternates_the_trees_round_by_round():
    from benchmarks.scale import _interleaved

    order = []
    got = _interleaved({"ours": "A", "baseline": "B"}, 4, "task", measure=lambda tree, task, **args: order.append(tree) or
                       {"tree": tree, **args}, x=1)
    assert order == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert got == {"ours": [{"tree": "A", "x": 1}] * 4, "baseline": [{"tree": "B", "x": 1}] * 4}


@pytest.mark.slow
def test_the_scale_probes_measure_a_few_hundred_files_as_the_full_trees(tmp_path):
    """The ``scale`` section's measurements (benchmarks/scale_probe.py), in this process, on
    every 400th NTU name: the counts they report are the tree's, per split, clip and view."""
    from benchmarks import scale_probe

    root = str(full_size_tree(tmp_path, "ntu60", every=400))
    names = sorted(os.listdir(root))
    train = sum(int(n[9:12]) in NTU_CS_TRAIN for n in names)
    got = scale_probe.setup({"dataset": "ntu60", "root": root, "protocol": "cs"})
    test = len(names) - train  # NTU validates on the test split unless val_fraction holds some out
    assert got["videos"] == {"train": train, "val": test, "test": test} and got["setup_s"] > 0
    got = scale_probe.scan({"dataset": "ntu60", "root": root})
    assert got["files"] == len(names)
    got = scale_probe.first_batch({"dataset": "ntu60", "root": root, "protocol": "cs", "workers": 1, "batch": 2})
    assert got["shape"] == [2, 3, 8, 224, 224]
    args = {"dataset": "ntu60", "root": root, "protocol": "cs", "workers": 2, "batch": 8}
    whole, part = (scale_probe.worker_memory({**args, "max_batches": limit}) for limit in (None, 5))
    assert whole["train_videos"] == train and whole["clips"] == train // 8 * 8 and part["clips"] == 5 * 8
    assert whole["workers"] == 2 and len(whole["growth_mib"]) == 2 and min(whole["uss_start_mib"]) > 0
    modes = [["train"], ["eval", 1, 3], ["eval", 2, 3]]
    got = scale_probe.throughput({"files": [str(Path(root) / names[0])] * 3, "modes": modes, "batch": 2,
                                  "repeat_train": 2})["modes"]
    assert [m["items"] for m in got] == [6, 3, 3] and all(m["cpu_s_per_item"] > 0 for m in got)
