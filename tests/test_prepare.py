"""The `prepare` command: per-protocol report, validation of every file, resumable parallel
transcoding to H.264 mp4 at a short side with a short GOP."""

import json
import os
import shutil

import av
import pytest
from video_trees import clip_frames, damaged_tail, truncated, write_avi, zero_length

from dna_video.data import NTURGBD60
from dna_video.data.video import probe_video
from dna_video.tools.prepare import main, scan, validate_file


def test_scan_reports_each_protocol_against_the_full_dataset(smarthome_tree):
    root, facts = smarthome_tree
    files, reports = scan("toyota_smarthome", str(root))
    assert set(reports) == {"cs", "cv1", "cv2"}
    cs = reports["cs"]["splits"]
    assert {s: (v["videos"], v["expected"]) for s, v in cs.items()} == {
        "train": (21, 8829), "val": (5, 1853), "test": (16, 5433),
    }
    assert cs["train"]["classes"] == 5 and cs["train"]["num_classes"] == 31
    assert reports["cv2"]["splits"]["train"]["expected"] == 7806
    assert reports["cv1"]["excluded"]["camera not used by the protocol"] == 22
    # Every well-named video is processed (also those a protocol leaves out); a malformed
    # name or another file type is not a video of the dataset.
    names = {f.name for f in files}
    assert len(files) == len(facts["valid"]) + 3 and "Dance_p03_r00_v00_c01.mp4" in names
    assert not names & set(facts["malformed"] + facts["other"])


def test_validation_tells_ok_short_and_unreadable_files(tmp_path):
    good = tmp_path / "S001C001P001R001A001_rgb.avi"
    write_avi(good, clip_frames(0, n=20))
    short_avi = truncated(tmp_path / "S001C002P001R001A001_rgb.avi", good, 0.8)  # AVI index lost
    short_mp4 = damaged_tail(tmp_path / "S001C003P001R001A001.mp4", clip_frames(1, n=20))
    empty = zero_length(tmp_path / "S001C001P002R001A001_rgb.avi")
    results = {p.name: validate_file(str(p)) for p in (good, short_avi, short_mp4, empty)}
    assert results[good.name]["status"] == "ok" and results[good.name]["decodable"] == 20
    for name in (short_avi.name, short_mp4.name):
        assert results[name]["status"] == "short" and results[name]["reported"] == 20
        assert 0 < results[name]["decodable"] < 20
    assert results[empty.name]["status"] == "unreadable" and empty.name in results[empty.name]["error"]


@pytest.mark.slow
def test_transcode_in_parallel_resumes_and_the_copy_loads(ntu_tree, tmp_path):
    src, facts = ntu_tree
    root = tmp_path / "nturgb+d_rgb"
    shutil.copytree(src, root)
    broken = zero_length(root / "S001C001P006R001A002_rgb.avi")  # replaces a good video
    damaged = root / "S001C002P006R001A002_rgb.avi"
    damaged.unlink()
    damaged = damaged_tail(root / "S001C002P006R001A002.mp4", clip_frames(5, n=20))
    out = tmp_path / "ntu_mp4"
    report = tmp_path / "report.json"
    args = ["ntu60", str(root), "--transcode", str(out), "--short-side", "32", "--gop", "4", "--workers", "2",
            "--validate", "--report", str(report)]
    assert main(args) == 1  # one source could not be read
    outcome = json.loads(report.read_text())
    status = {os.path.basename(r["path"]): r["status"] for r in outcome["transcode"]}
    assert status[broken.name] == "failed" and status[damaged.name] == "damaged"
    assert sum(s == "done" for s in status.values()) == len(status) - 2 == len(facts["valid"]) + 2 - 2
    # Same relative paths, .mp4, short side 32 (64x48 -> 42x32), every frame kept.
    copy = out / "extra" / "S002C003P007R001A010_rgb.mp4"
    assert probe_video(str(copy)) == (12, 30.0)
    with av.open(str(copy)) as c:
        stream = c.streams.video[0]
        assert (stream.codec_context.name, stream.width, stream.height) == ("h264", 42, 32)
        packets = [p for p in c.demux(stream) if p.size]
    keyframes = [i for i, p in enumerate(packets) if p.is_keyframe]
    assert keyframes == [0, 4, 8]  # GOP 4
    assert all(p.pts == p.dts for p in packets)  # no B-frames: decode order = display order
    assert all(v["status"] == "ok" for v in outcome["validate"])  # the copies all decode
    # The copy is a dataset root: same splits as the original, minus the failed file.
    dm = NTURGBD60(str(out), protocol="cs", num_workers=0)
    dm.setup("test")
    assert len(dm.datasets["test"]) == 19 - 1

    # Resume: finished files are skipped; a file whose transcode was interrupted is redone.
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.mp4")}
    redo = out / "S001C001P001R001A001_rgb.mp4"
    redo.unlink()
    (out / "S001C001P001R001A001_rgb.mp4.partial").write_bytes(b"half a file")
    assert main(["ntu60", str(root), "--transcode", str(out), "--short-side", "32", "--workers", "1",
                 "--report", str(report)]) == 1
    status = {os.path.basename(r["path"]): r["status"] for r in json.loads(report.read_text())["transcode"]}
    assert status["S001C001P001R001A001_rgb.avi"] == "done"
    assert sum(s == "skipped" for s in status.values()) == len(before) - 1
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*.mp4")}
    assert all(after[p] == t for p, t in before.items() if p != redo)
    assert not list(out.rglob("*.partial")) and probe_video(str(redo))[0] == 12


@pytest.mark.slow
def test_a_file_that_hangs_or_crashes_the_decoder_is_named_and_the_run_goes_on(tmp_path, monkeypatch):
    import time

    import dna_video.tools.prepare as prepare

    names = ["S001C001P001R001A001_rgb.avi", "S001C001P001R001A002_rgb.avi", "S001C001P001R001A003_rgb.avi",
             "S001C001P001R001A004_rgb.avi"]
    for i, name in enumerate(names):
        write_avi(tmp_path / name, clip_frames(i, n=8))
    real = prepare.validate_file

    def decoder_with_bad_files(path):
        # Stand-ins for decord stuck in C code and for a segfault: no Python exception.
        if path.endswith("A002_rgb.avi"):
            time.sleep(120)
        if path.endswith("A003_rgb.avi"):
            os._exit(139)
        return real(path)

    monkeypatch.setattr(prepare, "validate_file", decoder_with_bad_files)  # inherited by the forked children
    report = tmp_path / "report.json"
    start = time.perf_counter()
    assert main(["ntu60", str(tmp_path), "--validate", "--workers", "2", "--timeout", "3", "--report", str(report)]) == 1
    assert time.perf_counter() - start < 60
    outcome = {os.path.basename(r["path"]): r for r in json.loads(report.read_text())["validate"]}
    assert [outcome[n]["status"] for n in names] == ["ok", "unreadable", "unreadable", "ok"]
    assert "still decoding after 3 s" in outcome[names[1]]["error"]
    assert "crashed (process exit code 139)" in outcome[names[2]]["error"]
