"""Held-out synthetic test sets (``test_videos``): balanced, in the test split, from seeds no
training video uses; the DataModule reads them as its test split, with a fixed balanced
subset (``test_subset``); their folder is their own."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from dna_video.data.smarthome import CS_TEST_SUBJECTS, parse_smarthome_name
from dna_video.data.synthetic import SyntheticSmarthome, _video_plan, heldout_plan, render_video
from dna_video.data.video import read_frames


def test_heldout_plan_is_balanced_in_the_test_split_and_never_repeats_a_training_seed():
    plan = heldout_plan(0, 2000)
    assert Counter(label for _, label, _ in plan) == {c: 400 for c in range(5)}
    names = [name.filename for name, _, _ in plan]
    assert len(set(names)) == 2000
    parsed = [parse_smarthome_name(n) for n in names]
    assert all(p is not None and p.subject in CS_TEST_SUBJECTS for p in parsed)
    seeds = [s for _, _, s in plan]
    assert len(set(seeds)) == 2000 and min(seeds) >= 2**31 and max(seeds) < 2**32
    training = {s for seed in range(20) for _, _, s in _video_plan(seed, 6)}
    assert max(training) < 2**31 and not training & set(seeds)
    assert heldout_plan(0, 2000) == plan and heldout_plan(1, 2000) != plan
    with pytest.raises(ValueError, match="data.init_args.test_videos is 0: give 1 or more"):
        heldout_plan(0, 0)


def _data(root, **kwargs):
    return SyntheticSmarthome(root=str(root), videos_per_subject_class=1, num_workers=0, num_frames=2,
                              sampling_rate=4, crop_size=64, train_short_side=(64, 70), test_num_crops=1, **kwargs)


def test_a_heldout_test_split_replaces_the_roots(synthetic_root, tmp_path, caplog):
    plain = _data(synthetic_root)
    plain.setup()
    held = _data(synthetic_root, test_videos=15, test_root=str(tmp_path / "held"))
    held.prepare_data()  # the root is there: writes only the 15 held-out videos
    held.setup()
    for split in ("train", "val"):
        assert held.datasets[split].records == plain.datasets[split].records
    test = held.datasets["test"].records
    plan = {name.filename: (label, seed) for name, label, seed in heldout_plan(0, 15)}
    assert sorted(Path(r.path).name for r in test) == sorted(plan)
    assert all(Path(r.path).parent == tmp_path / "held" and r.label == plan[Path(r.path).name][0] for r in test)
    # The files hold the plan's videos (H.264 smooths the texture noise), not the root's test videos.
    record = test[0]
    label, seed = plan[Path(record.path).name]
    decoded = read_frames(record.path, lambda n, fps: np.arange(3)).frames.astype(float)
    close = np.abs(decoded - render_video(label, seed)[:3]).mean()
    assert close < 8 and np.abs(decoded - render_video(label, seed + 1)[:3]).mean() > 3 * close


def test_test_subset_is_the_first_videos_class_by_class(synthetic_root, tmp_path, caplog):
    with caplog.at_level("INFO"):
        data = _data(synthetic_root, test_videos=15, test_root=str(tmp_path / "held"), test_subset=7)
        data.prepare_data()
        data.setup("test")
    kept = data.datasets["test"].records
    # By hand: the files sorted per class; take the first of classes 0-4, then the second of classes 0 and 1.
    files = sorted(p.name for p in (tmp_path / "held").glob("*.mp4"))
    by_class = [[f for f in files if f.startswith(name + "_")] for name in data.class_names]
    expected = [by_class[c][0] for c in range(5)] + [by_class[0][1], by_class[1][1]]
    assert sorted(Path(r.path).name for r in kept) == sorted(expected)
    assert "outside test_subset: 8" in caplog.text  # the rest counted, not silently gone
    with pytest.raises(ValueError, match="data.init_args.test_subset is 16 but the test split holds 15 videos"):
        _data(synthetic_root, test_videos=15, test_root=str(tmp_path / "held"), test_subset=16).setup("test")


def test_each_set_of_options_has_its_own_heldout_folder(tmp_path):
    root = tmp_path / "root"
    a = _data(root, test_videos=2000).heldout_folder
    assert a.parent == tmp_path and a.name.startswith("root.test2000-")
    assert _data(root, test_videos=2000).heldout_folder == a
    assert _data(root, test_videos=1000).heldout_folder != a
    assert _data(root, test_videos=2000, classes="source").heldout_folder != a
    assert _data(root, test_videos=2000, seed=1).heldout_folder != a
    assert _data(root).heldout_folder is None
