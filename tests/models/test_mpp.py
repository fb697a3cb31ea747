"""Masked patch prediction (B.1.2): targets, corruption statistics, and a short run that learns."""

import pytest
import torch

import vitkit
from tiny import build_tiny_vit
from vitkit.models.mpp import MaskedPatchPrediction, corrupt_patches, patch_targets, quantize_colors


def test_mean_colour_target_of_a_hand_built_image():
    """Four 4x4 patches with known colours; 3 bits per channel, class = r*64 + g*8 + b."""
    image = torch.full((1, 3, 8, 8), -1.0)
    image[0, 0, :4, :4] = 1.0  # top-left red: r=7
    image[0, 1, :4, 4:] = 0.0  # top-right green at mid level: g=4
    image[0, :, 4:, :4] = 1.0  # bottom-left white
    image[0, 2, 4:, 4:6] = 1.0  # bottom-right: half the patch blue, mean b = 0 -> level 4
    targets = patch_targets(image, 4, "mean_color")
    assert targets.tolist() == [[7 * 64, 4 * 8, 511, 4]]


def test_downsized_target_predicts_every_cell():
    image = torch.rand(2, 3, 16, 16) * 2 - 1
    cells = patch_targets(image, 16, "downsized")
    assert cells.shape == (2, 1, 16)
    expected = quantize_colors(torch.nn.functional.avg_pool2d(image, 4).permute(0, 2, 3, 1), 3).reshape(2, 16)
    assert torch.equal(cells[:, 0], expected)


def test_grayscale_degenerates_to_grey_levels():
    image = torch.linspace(-1, 1, 8).repeat_interleave(4).view(1, 1, 1, 32).expand(1, 1, 4, 32)
    assert patch_targets(image, 4, "mean_color").tolist() == [list(range(8))]
    mpp = MaskedPatchPrediction(build_tiny_vit(in_chans=1))
    assert mpp.head.out_features == 8


def test_corruption_statistics_are_50_percent_and_80_10_10():
    torch.manual_seed(0)
    patches = torch.randn(64, 256, 4)
    mask_token = torch.full((1, 1, 4), 100.0)
    corrupted, selected = corrupt_patches(patches, mask_token)
    is_mask = (corrupted == 100.0).all(-1)
    unchanged = (corrupted == patches).all(-1)
    replaced = selected & ~is_mask & ~unchanged
    n = selected.sum()
    assert selected.float().mean().item() == pytest.approx(0.5, abs=0.01)
    assert (is_mask.sum() / n).item() == pytest.approx(0.8, abs=0.015)
    assert (replaced.sum() / n).item() == pytest.approx(0.1, abs=0.01)
    assert ((selected & unchanged).sum() / n).item() == pytest.approx(0.1, abs=0.01)
    assert not (is_mask & ~selected).any() and (corrupted[~selected] == patches[~selected]).all()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["mean_color", "downsized", "pixels"])
def test_a_short_run_learns(target):
    torch.manual_seed(0)
    vit = vitkit.create_model(
        "ViT-Ti/16", img_size=32, patch_size=8, depth=2, hidden_size=48, num_heads=3, mlp_dim=96
    )
    mpp = MaskedPatchPrediction(vit, target=target)
    images = torch.rand(8, 3, 1, 1).expand(8, 3, 32, 32) * 2 - 1  # flat colours: learnable from context
    optimizer = torch.optim.AdamW(mpp.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):
        loss = mpp(images, generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.6 * sum(losses[:5])
    assert "mask_token" in mpp.no_weight_decay() and "vit.cls_token" in mpp.no_weight_decay()
