"""The distractor dataset's ground truth and the denoising measures: masks cover exactly the
drawn shapes, travel with the clip through sampling, resize, crop and flip, and the region
shares and the switched-off negative branch match independent computations."""

import numpy as np
import pytest
import torch

from dna_video.analysis.denoising import evaluate_masked, negative_branch_off, patch_shares, region_mass
from dna_video.data.dataset import VideoClipDataset, VideoRecord
from dna_video.data.distractors import generate_distractor_dataset, read_masks, render_scene
from dna_video.data.sampling import FrameSampler
from dna_video.data.synthetic import SYNTHETIC_CLASSES
from dna_video.data.transforms import EvalClipTransform, TrainClipTransform
from dna_video.data.video import write_video
from dna_video.models.timesformer import TimeSformer


@pytest.mark.parametrize("level, k", [("none", 0), ("random", 3), ("confusing", 2)])
def test_masks_cover_exactly_the_drawn_shapes(level, k):
    for label in range(len(SYNTHETIC_CLASSES)):
        frames, masks = render_scene(label, seed=100 + label, level=level, num_distractors=max(k, 1),
                                     distractor_size=1.0, similarity=0.5, height=48, width=64)
        clean, clean_masks = render_scene(label, seed=100 + label, level="none", height=48, width=64)
        assert masks.shape == (len(frames), 1 + k, 48, 64) and masks.dtype == bool
        # Regions are disjoint (each pixel shows one thing).
        assert masks.sum(axis=1).max() <= 1
        # The distractors: exactly where the frame differs from the same video without them.
        changed = (frames != clean).any(axis=-1)
        np.testing.assert_array_equal(masks[:, 1:].any(axis=1), changed)
        # The actor: the same pixels at every level, and exactly the pixels in its two stripe colours.
        np.testing.assert_array_equal(masks[:, 0], clean_masks[:, 0])
        shown = masks[:, 0].any(axis=(1, 2))
        assert shown.any()
        i = int(np.flatnonzero(shown)[0])
        colours = np.unique(frames[i][masks[i, 0]], axis=0)
        assert 1 <= len(colours) <= 2
        in_colours = (frames[i][..., None, :] == colours[None, None]).all(-1).any(-1)
        np.testing.assert_array_equal(in_colours, masks[i, 0])
        if level != "none":  # the distractors are drawn (somewhere in the video)
            assert masks[:, 1:].any(axis=(0, 2, 3)).all()


def test_confusing_distractors_move_like_another_class_and_never_carry_the_stripes():
    frames, masks = render_scene(3, seed=7, level="confusing", num_distractors=1, similarity=1.0, height=48, width=64)
    actor_colours = {tuple(c) for c in np.unique(frames[:, :, :][masks[:, 0]], axis=0)}
    distractor_colours = {tuple(c) for c in np.unique(frames[masks[:, 1]], axis=0)}
    assert len(actor_colours) == 2 and len(distractor_colours) == 1  # solid: never the two stripe colours
    # Move.Line actor; the distractor's track is another class's (its centre path differs).
    ys, xs = np.nonzero(masks[:, 1].any(axis=0))
    assert xs.size > 0


def test_bad_level_named():
    with pytest.raises(ValueError, match="unknown distractor level 'noisy'"):
        render_scene(0, 0, level="noisy")


def _square_video(tmp_path):
    """A real mp4 whose frame i shows a white 10x10 square at a place that depends on i, and
    masks of that square (frame i's mask marks frame i's square): a mask that took other
    frames, another crop or no flip would miss the decoded square."""
    n, h, w = 40, 48, 64
    frames = np.zeros((n, h, w, 3), np.uint8)
    masks = np.zeros((n, 1, h, w), bool)
    for i in range(n):
        y, x = 4 + (i * 7) % 30, 2 + (i * 13) % 50
        frames[i, y: y + 10, x: x + 10] = 255
        masks[i, 0, y: y + 10, x: x + 10] = True
    path = tmp_path / "squares.mp4"
    write_video(str(path), frames, fps=30.0)
    return str(path), masks


def _agree(video: torch.Tensor, masks: torch.Tensor) -> bool:
    """Whether the bright pixels of ``video`` (C, T, H, W, normalised) and ``masks`` (1, T, H, W)
    mark the same square in every frame: IoU > 0.6 where the mask holds a good part of it, few
    bright pixels where it holds none (a sliver at the crop edge may round either way)."""
    bright = video.mean(dim=0) > 0.5
    m = masks[0].bool()
    area, lit = m.sum(dim=(1, 2)), bright.sum(dim=(1, 2))
    iou = (bright & m).sum(dim=(1, 2)) / (bright | m).sum(dim=(1, 2)).clamp_min(1)
    return bool((iou[area >= 30] > 0.6).all() and (lit[area == 0] < 30).all())


def test_masks_travel_with_the_clip_through_sampling_crop_and_flip(tmp_path):
    path, masks = _square_video(tmp_path)
    sampler = FrameSampler(num_frames=6, sampling_rate=3, target_fps=None)
    train = VideoClipDataset([VideoRecord(path, 0)], sampler,
                             TrainClipTransform((48, 60), 40, True, (0.0,) * 3, (1.0,) * 3), train=True,
                             mask_reader=lambda p: masks)
    torch.manual_seed(0)
    for _ in range(12):  # random starts, scales, crops and flips
        sample = train[0]
        assert sample["masks"].shape == (1, 6, 40, 40)
        assert _agree(sample["video"], sample["masks"])
    evaluation = VideoClipDataset([VideoRecord(path, 0)], sampler, EvalClipTransform(40, 3, (0.0,) * 3, (1.0,) * 3),
                                  train=False, num_clips=2, mask_reader=lambda p: masks)
    sample = evaluation[0]
    assert sample["video"].shape == (6, 3, 6, 40, 40) and sample["masks"].shape == (6, 1, 6, 40, 40)
    for video, view_masks in zip(sample["video"], sample["masks"]):
        assert _agree(video, view_masks)
    # A mask of the wrong frames does not fit: the check above can fail.
    shifted = VideoClipDataset([VideoRecord(path, 0)], sampler, EvalClipTransform(40, 1, (0.0,) * 3, (1.0,) * 3),
                               train=False, mask_reader=lambda p: np.roll(masks, 1, axis=0))
    wrong = shifted[0]
    assert not _agree(wrong["video"][0], wrong["masks"][0])


def test_mask_files_written_beside_the_videos_round_trip(tmp_path):
    root = generate_distractor_dataset(tmp_path / "d", level="random", num_distractors=2, videos_per_subject_class=1,
                                       height=32, width=40, workers=1)
    videos = sorted(root.glob("*.mp4"))
    assert len(videos) == 18 * len(SYNTHETIC_CLASSES)
    masks = read_masks(videos[0])
    assert masks.shape[1:] == (3, 32, 40) and masks.dtype == bool and masks[:, 0].any()
    name = videos[0].name
    label = next(i for i, c in enumerate(SYNTHETIC_CLASSES) if name.startswith(c + "_"))
    assert masks.any()
    with pytest.raises(FileNotFoundError, match="no ground-truth masks"):
        read_masks(tmp_path / "elsewhere.mp4")
    assert 0 <= label < len(SYNTHETIC_CLASSES)


def test_patch_shares_and_region_mass_against_a_hand_count():
    masks = torch.zeros(1, 2, 1, 4, 4, dtype=torch.uint8)  # actor, one distractor; one frame; 2x2 patches of 2
    masks[0, 0, 0, 0, 0] = 1  # a quarter of patch (0, 0)
    masks[0, 1, 0, 2:, 2:] = 1  # all of patch (1, 1)
    shares = patch_shares(masks, 2)
    expected = torch.zeros(1, 2, 1, 2, 2)
    expected[0, 0, 0, 0, 0] = 0.25
    expected[0, 1, 0, 1, 1] = 1.0
    torch.testing.assert_close(shares, expected)
    cls_map = torch.tensor([[[[0.4, 0.1], [0.2, 0.3]]]])  # rows of one frame sum to 1
    mass = region_mass(cls_map, shares)
    torch.testing.assert_close(mass, torch.tensor([[0.1, 0.3, 0.6]]))


def _tiny(attention):
    torch.manual_seed(0)
    return TimeSformer(num_classes=3, num_frames=2, img_size=16, patch_size=8, embed_dim=16, depth=2, num_heads=2,
                       attention=attention).eval()


def test_negative_branch_off_sets_alpha_to_zero_and_restores_it():
    net = _tiny("dna")
    video = torch.randn(1, 3, 2, 16, 16)
    for block in net.blocks:
        for module in (block.attn, block.temporal_attn):
            torch.nn.init.normal_(module.neg_scalers)
    before = net(video)
    alphas = [m.neg_scalers.clone() for m in net.modules() if hasattr(m, "neg_scalers")]
    with negative_branch_off(net) as changed:
        off = net(video)
        assert changed == 4
    expected = _tiny("dna")
    expected.load_state_dict(net.state_dict())
    with torch.no_grad():
        for module in expected.modules():
            if hasattr(module, "neg_scalers"):
                module.neg_scalers.zero_()
    torch.testing.assert_close(off, expected(video))
    assert not torch.allclose(off, before)
    torch.testing.assert_close(net(video), before)
    for saved, module in zip(alphas, [m for m in net.modules() if hasattr(m, "neg_scalers")]):
        torch.testing.assert_close(module.neg_scalers, saved)


def test_negative_branch_off_zeroes_diff_lambda():
    net = _tiny("diff")
    video = torch.randn(1, 3, 2, 16, 16)
    module = net.blocks[0].attn
    with negative_branch_off(net):
        assert float(module.lambda_full()) == 0.0
        off = net(video)
    assert float(module.lambda_full()) != 0.0
    assert not torch.allclose(off, net(video))


def test_evaluate_masked_mass_is_the_cls_attention_on_the_masked_patches():
    net = _tiny("dna")
    video = torch.randn(2, 1, 3, 2, 16, 16)
    masks = torch.zeros(2, 1, 2, 2, 16, 16, dtype=torch.uint8)
    masks[:, :, 0, :, :8, :8] = 1  # actor: patch (0, 0) in both frames
    masks[:, :, 1, :, 8:, 8:] = 1  # distractor: patch (1, 1)
    result = evaluate_masked(net, [{"video": video, "masks": masks, "label": torch.tensor([0, 1])}])
    # Independent: the written-out maps of each spatial module, cls row, patch 0 and patch 3.
    from dna_video.analysis.maps import capture_maps

    _, maps = capture_maps(net, video[:, 0])
    for layer in range(2):
        for branch in ("positive", "negative"):
            row = maps[f"blocks.{layer}.attn"][branch][:, :, 0, 1:].mean(dim=1).reshape(2, 2, 4)  # b t patches
            # Per video: the mass on the patch over the mass on all patches, both summed over frames.
            share = row.sum(dim=1) / row.sum(dim=(1, 2))[:, None]
            expected = torch.stack([share[:, 0].mean(), share[:, 3].mean()]).double()
            torch.testing.assert_close(result["mass"][branch][layer, :2], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(result["area"], torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64))
    assert result["probs"].shape == (2, 3)
