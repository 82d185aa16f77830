"""Values of the core against independent computations, written to catch realistic bugs that
shape checks let through: the mean class accuracy and view aggregation against hand counts,
position-embedding resampling of non-square grids against a written-out interpolation (also
through the model's forward), and chunked multi-view evaluation against one view at a time.

Checked to fail with these bugs planted (CONTRIBUTING.md), which the rest of the suite let
through: height and width swapped in ``TimeSformer._pos_embed`` or in ``resample_pos_embed``;
evaluation chunks concatenated in reverse order in ``VideoClassifier.view_logits``."""

import math

import pytest
import torch
from einops import rearrange

from dna_video.tasks.metrics import MeanClassAccuracy
from dna_video.tasks.video import Evaluation, VideoClassifier
from dna_video.tasks.views import aggregate_views
from dna_video.models.timesformer import TimeSformerSpec, resample_pos_embed, timesformer


# -- mean class accuracy -------------------------------------------------------------------------
def test_mean_class_accuracy_hand_count_over_updates():
    metric = MeanClassAccuracy(num_classes=5)
    # First update as class indices, second as scores (argmax taken): counts add up.
    metric.update(torch.tensor([0, 1, 1, 4]), torch.tensor([0, 1, 2, 2]))
    scores = torch.nn.functional.one_hot(torch.tensor([3, 0, 2]), 5).float() * 2 - 0.5
    metric.update(scores, torch.tensor([3, 0, 0]))
    # targets 0,1,2,2,3,0,0 with predictions 0,1,1,4,3,0,2 -> class 0: 2/3, 1: 1/1, 2: 0/2,
    # 3: 1/1; class 4 is predicted but never a target, so it is not averaged.
    expected = [2 / 3, 1.0, 0.0, 1.0]
    # Integer counts: a float32 count would stop counting at 2**24 samples.
    assert metric.count.dtype == metric.correct.dtype == torch.long
    assert metric.count.tolist() == [3, 1, 2, 1, 0]
    assert metric.correct.tolist() == [2, 1, 0, 1, 0]
    per_class = metric.per_class()
    assert per_class[:4].tolist() == pytest.approx(expected) and math.isnan(per_class[4].item())
    assert metric.compute().item() == pytest.approx(sum(expected) / 4)


def test_mean_class_accuracy_without_targets_is_nan_and_reset_clears():
    metric = MeanClassAccuracy(num_classes=3)
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(metric.compute().item())
    metric.update(torch.tensor([2]), torch.tensor([2]))
    assert metric.compute().item() == 1.0
    metric.reset()
    assert metric.count.tolist() == [0, 0, 0] and math.isnan(metric.compute().item())


def test_mean_class_accuracy_sums_its_states_across_processes():
    """Two ranks' states merged by their reduction (``dist_reduce_fx``, what DDP's sync uses)
    give the counts of one metric that saw everything."""
    a, b = MeanClassAccuracy(num_classes=2), MeanClassAccuracy(num_classes=2)
    a.update(torch.tensor([0, 1]), torch.tensor([0, 0]))  # class 0: 1/2
    b.update(torch.tensor([1, 1]), torch.tensor([1, 0]))  # class 1: 1/1, class 0: 0/1
    a.merge_state(b)
    assert a.count.tolist() == [3, 1] and a.correct.tolist() == [1, 1]
    assert a.compute().item() == pytest.approx((1 / 3 + 1) / 2)


# -- view aggregation ----------------------------------------------------------------------------
def test_aggregate_views_against_a_hand_computation():
    logits = torch.tensor([[[1.0, 2.0, 0.0], [3.0, -1.0, 0.5]]])  # 1 video, 2 views, 3 classes
    torch.testing.assert_close(aggregate_views(logits, "sum"), torch.tensor([[4.0, 1.0, 0.5]]))
    torch.testing.assert_close(aggregate_views(logits), torch.tensor([[4.0, 1.0, 0.5]]))  # default: sum of logits
    torch.testing.assert_close(aggregate_views(logits, "mean"), torch.tensor([[2.0, 0.5, 0.25]]))
    torch.testing.assert_close(aggregate_views(logits, "max"), torch.tensor([[3.0, 2.0, 0.5]]))
    e = torch.exp(logits[0])
    probs = e / e.sum(-1, keepdim=True)
    torch.testing.assert_close(aggregate_views(logits, "sum", "probs"), probs.sum(0, keepdim=True))
    torch.testing.assert_close(aggregate_views(logits, "max", "probs"), probs.amax(0, keepdim=True))
    with pytest.raises(ValueError, match="unknown view aggregation 'median'"):
        aggregate_views(logits, "median")


# -- position-embedding resampling on non-square grids -------------------------------------------
def _source_index(out_size: int, in_size: int, mode: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per output index along one axis: the two source indices and the weight of the second,
    written out from the definitions (half-pixel centres for linear, floor for nearest)."""
    scale = in_size / out_size
    i = torch.arange(out_size, dtype=torch.float64)
    if mode == "nearest":
        lo = torch.floor(i * scale).long().clamp(max=in_size - 1)
        return lo, lo, torch.zeros(out_size, dtype=torch.float64)
    src = ((i + 0.5) * scale - 0.5).clamp(min=0)
    lo = torch.floor(src).long().clamp(max=in_size - 1)
    hi = (lo + 1).clamp(max=in_size - 1)
    return lo, hi, src - lo


def written_out_resample(grid: torch.Tensor, new_hw: tuple[int, int], mode: str) -> torch.Tensor:
    """(h, w, D) -> (H, W, D): separable nearest or bilinear (upsampling only: no antialias)."""
    rl, rh, rw = _source_index(new_hw[0], grid.shape[0], mode)
    cl, ch, cw = _source_index(new_hw[1], grid.shape[1], mode)
    rows = grid[rl] * (1 - rw)[:, None, None] + grid[rh] * rw[:, None, None]
    return rows[:, cl] * (1 - cw)[None, :, None] + rows[:, ch] * cw[None, :, None]


@pytest.mark.parametrize(
    "old, new, mode",
    [((2, 3), (4, 6), "bilinear"), ((3, 2), (3, 5), "bilinear"), ((4, 4), (4, 6), "bilinear"),
     ((4, 4), (6, 3), "nearest"), ((2, 5), (4, 3), "nearest")],
)
def test_resample_pos_embed_non_square_against_written_out_interpolation(old, new, mode):
    torch.manual_seed(0)
    pos = torch.randn(1, 1 + old[0] * old[1], 8, dtype=torch.float64)
    out = resample_pos_embed(pos, new, old, mode)
    assert out.shape == (1, 1 + new[0] * new[1], 8)
    torch.testing.assert_close(out[:, 0], pos[:, 0])  # cls entry kept
    grid = rearrange(pos[0, 1:], "(h w) d -> h w d", h=old[0])
    expected = rearrange(written_out_resample(grid, new, mode), "h w d -> (h w) d")
    torch.testing.assert_close(out[0, 1:], expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "mode, height, width",
    # Bilinear only upsampled: downsampling is antialiased, which the written-out version is not.
    [("nearest", 32, 48), ("nearest", 48, 32), ("nearest", 24, 40), ("bilinear", 32, 48), ("bilinear", 48, 40)],
)
def test_forward_on_non_square_input_adds_the_resampled_pos_embed(mode, height, width):
    """The embedding the forward pass adds for a non-square input is the configured 4x4 grid
    resampled to the input's rows and columns (rows first), checked token by token."""
    torch.manual_seed(0)
    model = timesformer("tiny", num_classes=3, img_size=32, num_frames=2, embed_interpolation=mode).double()
    with torch.no_grad():  # patch embedding, cls token and time embedding out of the way
        model.patch_embed.proj.weight.zero_()
        model.patch_embed.proj.bias.zero_()
        model.cls_token.zero_()
        model.pos_embed.normal_()
    tokens = model.embed(torch.randn(1, 3, 2, height, width, dtype=torch.float64))
    h, w = height // 8, width // 8
    added = rearrange(tokens[0, 1:], "(h w t) d -> t h w d", h=h, w=w, t=2)
    grid = rearrange(model.pos_embed[0, 1:].detach(), "(h w) d -> h w d", h=4)
    expected = written_out_resample(grid, (h, w), mode)
    for frame in added:
        torch.testing.assert_close(frame, expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(tokens[0, 0], model.pos_embed[0, 0].detach())


# -- chunked multi-view evaluation ---------------------------------------------------------------
def _classifier(chunk: int) -> VideoClassifier:
    torch.manual_seed(0)
    model = VideoClassifier(num_classes=5, num_frames=2, img_size=16, evaluation=Evaluation(chunk_size=chunk),
                            network=TimeSformerSpec(arch="tiny", embed_dim=16, num_heads=2, depth=1), lr_scheduler=None)
    with torch.no_grad():  # a head that tells views apart
        model.net.head.weight.normal_()
    return model.eval()


@pytest.mark.parametrize("chunk", [1, 2, 4, 7])
def test_eval_chunks_give_the_per_view_logits_in_view_order(chunk):
    """3 videos x 3 views = 9 clips, more than one chunk: every (video, view) gets the logits
    of its own clip computed alone, and predictions equal an unchunked pass."""
    model = _classifier(chunk)
    views = torch.randn(3, 3, 3, 2, 16, 16)
    with torch.no_grad():
        logits = model.view_logits(views)
        alone = torch.stack([torch.stack([model.net(views[b, v][None])[0] for v in range(3)]) for b in range(3)])
        unchunked = _classifier(64)
        unchunked.load_state_dict(model.state_dict())
        batch = {"video": views, "label": torch.tensor([0, 1, 2]), "path": ["a", "b", "c"],
                 "failed": 0, "failed_paths": []}
        predicted = model.predict_step(batch, 0)
        expected = unchunked.predict_step(batch, 0)
    assert logits.shape == (3, 3, 5)
    torch.testing.assert_close(logits, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(predicted["probs"], expected["probs"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(predicted["probs"], alone.mean(1).softmax(-1), atol=1e-5, rtol=1e-5)
    assert torch.equal(predicted["pred"], alone.sum(1).argmax(-1))
    # The views differ, or a shuffled order would go unnoticed.
    assert (alone[:, 1:] - alone[:, :1]).abs().amax() > 1e-2
