"""The synthetic class sets: the source task's five motions (none of the target's labels) read
back from the actor's masks by a hand-written motion reader, its DataModule's class names
and labels, and the target renders unchanged by its addition (pinned digests)."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from dna_video.data.distractors import SyntheticDistractors, render_scene
from dna_video.data.synthetic import SOURCE_CLASSES, SYNTHETIC_CLASSES, SyntheticSmarthome, render_video


def _track(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre y, x and radius (sqrt(area / pi)) of one object per frame, from its pixels (T, H, W)."""
    ys, xs = np.array([[np.nonzero(m)[0].mean(), np.nonzero(m)[1].mean()] for m in masks]).T
    return ys, xs, np.sqrt(masks.sum(axis=(1, 2)) / np.pi)


def _reversals(values: np.ndarray, height: int) -> int:
    """How often a coordinate turns back by more than 5% of the height (local extrema)."""
    turns, anchor, direction = 0, values[0], 0
    for v in values[1:]:
        step = v - anchor
        if abs(step) < 0.05 * height and direction == 0:
            continue
        if direction == 0 or np.sign(step) == direction:
            if direction == 0 or (v - anchor) * direction > 0:
                anchor, direction = v, int(np.sign(step))
        elif abs(step) >= 0.05 * height:
            turns, anchor, direction = turns + 1, v, int(np.sign(step))
    return turns


def _source_motion_of(masks: np.ndarray, height: int) -> str:
    """Which source class one object performs, from its pixels alone: radius grows threefold
    and never shrinks: Grow.Once; one step of the centre > 0.25 of the height, the others
    small: Jump; both coordinates move steadily: Move.Diagonal; x steadily and y back and
    forth: Move.Zigzag; y back and forth in place: Bounce."""
    ys, xs, radius = _track(masks)
    t = np.arange(len(ys))
    if radius[-1] / radius[0] > 3 and (np.diff(radius) > -0.5).all():
        return "Grow.Once"
    steps = np.sort(np.hypot(np.diff(ys), np.diff(xs)))
    if steps[-1] > 0.25 * height and steps[-2] < 0.08 * height:
        return "Jump"
    steady_y, steady_x = (np.ptp(v) > 0 and abs(np.corrcoef(v, t)[0, 1]) > 0.95 for v in (ys, xs))
    if steady_y and steady_x and np.ptp(ys) > 0.3 * height and np.ptp(xs) > 0.3 * height:
        return "Move.Diagonal"
    if steady_x and np.ptp(xs) > 0.4 * height and _reversals(ys, height) >= 2:
        return "Move.Zigzag"
    if np.ptp(xs) < 0.1 * height and np.ptp(ys) > 0.2 * height and _reversals(ys, height) >= 2:
        return "Bounce"
    return "?"


def test_the_source_classes_are_other_motions_with_other_names():
    assert not set(SOURCE_CLASSES) & set(SYNTHETIC_CLASSES) and len(SOURCE_CLASSES) == 5
    h, w = 48, 64
    for seed in range(20):
        label = seed % 5
        _, masks = render_scene(label, 300 + seed, level="none", height=h, width=w, classes="source")
        assert _source_motion_of(masks[:, 0], h) == SOURCE_CLASSES[label], (seed, label)
        # The reader can fail: a target video of the same seed reads as no source class
        # (Stay, Blink and Change.Size have no steady track; Move.Line is steady on one axis only).
        _, target = render_scene(label, 300 + seed, level="none", height=h, width=w)
        if label != 0:  # Blink hides the actor: no track to read
            assert _source_motion_of(target[:, 0], h) == "?", (seed, label)
    # Both renderers take the set: the quickstart's videos (random-walk distractor) too.
    frames = render_video(2, 5, 48, 64, classes="source")
    assert frames.shape[1:] == (48, 64, 3) and not np.array_equal(frames, render_video(2, 5, 48, 64))
    with pytest.raises(ValueError, match="data.init_args.classes: unknown class set 'other'"):
        render_video(0, 0, classes="other")


def test_a_source_dataset_has_its_names_and_labels(tmp_path):
    data = SyntheticDistractors(root=str(tmp_path / "source"), classes="source", height=32, width=40,
                                videos_per_subject_class=1, num_workers=0, num_frames=2, crop_size=32,
                                train_short_side=(32, 36))
    assert data.class_names == list(SOURCE_CLASSES) and data.num_classes == 5
    data.prepare_data()
    data.setup("fit")
    records = data.datasets["train"].records + data.datasets["val"].records
    assert len(records) == 11 * 5
    for record in records:  # the label is the file name's class in SOURCE_CLASSES
        assert SOURCE_CLASSES[record.label] == Path(record.path).name.split("_")[0]
    assert json.loads((tmp_path / "source" / "distractors.json").read_text())["classes"] == list(SOURCE_CLASSES)
    # The target set keeps its names; the two never share a folder's manifest.
    target = SyntheticSmarthome(root=str(tmp_path / "target"))
    assert target.class_names == list(SYNTHETIC_CLASSES)
    assert target.manifest()[1]["classes"] != data.manifest()[1]["classes"]


def _digest(*arrays) -> str:
    return hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()[:16]


def test_target_renders_are_unchanged():
    """Digests of renders made before the cue level and the source classes were added (the
    same bytes as the commit before them): a change here changes every generated dataset."""
    assert _digest(render_video(0, 0, 48, 64)) == "976bba04c62287fb"
    assert _digest(render_video(3, 123456, 48, 64)) == "45d321507e185e4e"
    assert _digest(*render_scene(0, 0, level="none", height=48, width=64)) == "334087cce1927de8"
    assert _digest(*render_scene(0, 0, level="random", num_distractors=2, distractor_size=0.7, similarity=0.0,
                                 height=48, width=64)) == "5fc28055d7327d00"
    assert _digest(*render_scene(0, 0, level="confusing", num_distractors=1, distractor_size=0.7, similarity=0.0,
                                 height=48, width=64)) == "4829872a6a69b937"
    assert _digest(*render_scene(4, 7, level="confusing", num_distractors=2, similarity=1.0,
                                 height=48, width=64)) == "7794e18704bb2ed8"
