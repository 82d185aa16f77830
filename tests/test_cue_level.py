"""The misleading motion cue (distractor level ``cue``): how often the cue points to the label,
that the distractor really performs the cue class's motion (read back from its masks by a
hand-written motion reader), and that each video's cue label reaches the DataModule per record."""

import json
from pathlib import Path

import numpy as np
import pytest

from dna_video.data.distractors import SyntheticDistractors, cue_label_of, cue_motion, read_cues, render_scene
from dna_video.data.synthetic import _video_plan, heldout_plan

C = 5


def test_the_cue_points_to_the_label_at_cue_rate_and_to_another_label_uniformly_otherwise():
    draws = 5000
    labels = np.arange(draws) % C
    at = {rate: np.array([cue_label_of(int(y), 10_000 + i, rate, C) for i, y in enumerate(labels)])
          for rate in (0.0, 0.5, 0.9, 1.0)}
    assert (at[1.0] == labels).all() and (at[0.0] != labels).all()
    for rate in (0.5, 0.9):  # binomial: within 4 standard deviations
        faithful = (at[rate] == labels).mean()
        assert abs(faithful - rate) < 4 * np.sqrt(rate * (1 - rate) / draws)
    # When it does not point to the label, every other label is about as likely (4 x 1250 draws).
    conflicting = at[0.0]
    for y in range(C):
        others = np.bincount(conflicting[labels == y], minlength=C)
        assert others[y] == 0 and (np.abs(others[np.arange(C) != y] - 250) < 4 * np.sqrt(250 * 0.75)).all()
    # The same video points to the same other label at any rate; faithful at 0.5 stays faithful at 0.9.
    conflict_09 = at[0.9] != labels
    np.testing.assert_array_equal(at[0.9][conflict_09], at[0.0][conflict_09])
    assert ((at[0.5] == labels) <= (at[0.9] == labels)).all()
    # The cue motions: a derangement (never the label's own class).
    assert [cue_motion(y, C) for y in range(C)] == [1, 2, 3, 4, 0]


def _motion_of(masks: np.ndarray, height: int) -> int:
    """Which target class's motion one object performs, read from its visible pixels (T, H, W)
    alone: hidden a quarter of the time: Blink; radius varying twofold: Change.Size; centre
    moving over both axes: Move.Circle; over one: Move.Line; barely: Stay."""
    area = masks.sum(axis=(1, 2)).astype(float)
    if (area == 0).mean() >= 0.25:
        return 0
    seen = masks[area > 0]
    radius = np.sqrt(area[area > 0] / np.pi)
    low, high = np.percentile(radius, [10, 90])
    if high / low > 2:
        return 1
    centres = np.array([[ys.mean(), xs.mean()] for ys, xs in (np.nonzero(m) for m in seen)])
    span_y, span_x = (np.percentile(centres, 95, axis=0) - np.percentile(centres, 5, axis=0)) / height
    if span_y > 0.2 and span_x > 0.2:
        return 2
    if max(span_y, span_x) > 0.3:
        return 3
    return 4 if max(span_y, span_x) < 0.12 else -1


def test_the_distractor_performs_the_motion_of_the_class_its_cue_points_to():
    h, w = 48, 64
    for seed in range(25):
        label = seed % C
        frames, masks = render_scene(label, 500 + seed, level="cue", cue_rate=0.5, distractor_size=0.7,
                                     similarity=0.0, height=h, width=w)
        assert masks.shape[1] == 2  # the actor and one distractor
        cue = cue_label_of(label, 500 + seed, 0.5, C)
        assert _motion_of(masks[:, 1], h) == cue_motion(cue, C)
        # The reader can fail: the actor performs its own class, another one.
        if seed < 5:
            clean, clean_masks = render_scene(label, 500 + seed, level="none", height=h, width=w)
            np.testing.assert_array_equal(masks[:, 0], clean_masks[:, 0])  # the actor as without the cue
            assert _motion_of(clean_masks[:, 0], h) == label
            # The cue is one plain colour (never the actor's stripes) and all that changed.
            assert len(np.unique(frames[masks[:, 1]], axis=0)) == 1
            np.testing.assert_array_equal((frames != clean).any(axis=-1), masks[:, 1])


def test_cue_labels_reach_the_datamodule_per_record_and_the_test_set_can_break_the_cue(tmp_path):
    options = dict(root=str(tmp_path / "cue"), level="cue", cue_rate=0.9, test_cue_rate=0.0, test_videos=20,
                   distractor_size=0.7, similarity=0.0, height=32, width=40, videos_per_subject_class=1,
                   num_workers=0, num_frames=2, sampling_rate=4, train_short_side=(32, 36), crop_size=32,
                   test_num_crops=1)
    data = SyntheticDistractors(**options)
    data.prepare_data()
    data.setup()
    # Training: the root's plan; each cue label is cue_label_of for that video's seed at 0.9.
    seeds = {name.filename: s for name, _, s in _video_plan(0, 1)}
    train = data.datasets["train"].records
    cues = data.cue_labels("train")
    assert len(cues) == len(train) == 45
    assert cues == [cue_label_of(r.label, seeds[Path(r.path).name], 0.9, C) for r in train]
    # Test: the held-out set at cue_rate 0: every cue points to a wrong label.
    held = {name.filename: s for name, _, s in heldout_plan(0, 20)}
    test = data.datasets["test"].records
    cues = data.cue_labels("test")
    assert sorted(Path(r.path).name for r in test) == sorted(held)
    assert cues == [cue_label_of(r.label, held[Path(r.path).name], 0.0, C) for r in test]
    assert all(c != r.label for c, r in zip(cues, test))
    # A batch's index is the position in cue_labels: the cue label of the batch's own files.
    batch = next(iter(data.test_dataloader()))
    assert [cues[i] for i in batch["index"].tolist()] == [
        cue_label_of(int(y), held[Path(path).name], 0.0, C) for y, path in zip(batch["label"], batch["path"])]
    # The file beside the videos says the same.
    assert read_cues(Path(test[0].path).parent) == json.loads((Path(test[0].path).parent / "cues.json").read_text())


def test_bad_cue_options_are_named():
    with pytest.raises(ValueError, match="data.init_args.num_distractors is 2: level cue has one distractor"):
        SyntheticDistractors(level="cue", num_distractors=2)
    with pytest.raises(ValueError, match=r"data.init_args.cue_rate is 1.5: give a probability in \[0, 1\]"):
        SyntheticDistractors(level="cue", cue_rate=1.5)
    data = SyntheticDistractors(level="random")
    with pytest.raises(ValueError, match="cue labels exist at level cue only"):
        data.cue_labels("test")
