"""Attention probes with known answers: rollout, mean attention distance, attention maps of real models."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from vitkit.inspect import (
    attention_distance,
    attention_maps,
    attention_rollout,
    inspect_model,
    mean_attention_distance,
    patch_distances,
    rollout_masks,
    rollout_to_patches,
)


def brute_mean_pairwise(grid: tuple[int, int], stride: float) -> float:
    cells = list(itertools.product(range(grid[0]), range(grid[1])))
    total = sum(math.dist(a, b) for a in cells for b in cells)
    return stride * total / len(cells) ** 2


def test_reachable_after_plain_import():
    import vitkit as v

    assert v.inspect.attention_maps is attention_maps


def test_rollout_of_identity_is_identity():
    maps = [torch.eye(7).expand(2, 3, 7, 7) for _ in range(4)]
    assert torch.allclose(attention_rollout(maps), torch.eye(7, dtype=torch.float64).expand(2, 7, 7))


def test_rollout_matches_manual_product():
    torch.manual_seed(1)
    maps = [torch.rand(1, 2, 5, 5).softmax(-1) for _ in range(3)]
    expected = torch.eye(5, dtype=torch.float64)
    for a in maps:
        layer = 0.5 * a[0].double().mean(0) + 0.5 * torch.eye(5, dtype=torch.float64)
        expected = layer @ expected
    joint = attention_rollout(maps)
    assert torch.allclose(joint[0], expected)
    assert torch.allclose(joint.sum(-1), torch.ones(1, 5, dtype=torch.float64))


def test_rollout_to_patches_token_and_gap():
    joint = torch.rand(2, 1 + 6, 1 + 6, dtype=torch.float64)
    tok = rollout_to_patches(joint, (2, 3), 1, "token")
    assert tok.shape == (2, 2, 3)
    assert torch.allclose(tok.reshape(2, -1), joint[:, 0, 1:] / joint[:, 0, 1:].sum(-1, keepdim=True))
    gap_joint = torch.rand(2, 6, 6, dtype=torch.float64)
    gap = rollout_to_patches(gap_joint, (2, 3), 0, "gap")
    mean = gap_joint.mean(1)
    assert torch.allclose(gap.reshape(2, -1), mean / mean.sum(-1, keepdim=True))


def test_patch_distances_are_pixels_between_centres():
    d = patch_distances((2, 3), stride=16)
    assert d.shape == (6, 6)
    assert d[0, 1] == 16 and d[0, 3] == 16 and d[0, 5] == pytest.approx(16 * math.sqrt(5))
    assert torch.all(d.diagonal() == 0)


@pytest.mark.parametrize("prefix", [0, 1])
def test_distance_of_self_attention_is_zero(prefix):
    grid = (3, 4)
    t = prefix + 12
    attn = torch.eye(t).expand(2, 3, t, t)
    assert torch.all(mean_attention_distance([attn, attn], grid, 16, prefix) == 0)


@pytest.mark.parametrize("grid,stride", [((4, 4), 16), ((3, 5), 7), ((2, 2), 32)])
def test_distance_of_uniform_attention_is_mean_pairwise_distance(grid, stride):
    n = grid[0] * grid[1]
    expected = brute_mean_pairwise(grid, stride)
    gap = torch.full((1, 2, n, n), 1.0 / n)
    assert torch.allclose(
        attention_distance(gap, grid, stride), torch.full((1, 2), expected, dtype=torch.float64)
    )
    # with a class token: uniform over all T keys; renormalised over patches it is the same number,
    # counted as distance 0 it shrinks by n / T
    t = n + 1
    tok = torch.full((1, 2, t, t), 1.0 / t)
    assert attention_distance(tok, grid, stride, 1)[0, 0].item() == pytest.approx(expected)
    zero = attention_distance(tok, grid, stride, 1, prefix_keys="zero")[0, 0].item()
    assert zero == pytest.approx(expected * n / t)


def test_distance_shape_errors():
    with pytest.raises(ValueError, match="tokens"):
        attention_distance(torch.ones(1, 1, 5, 5) / 5, (2, 3), 1, 0)
    with pytest.raises(ValueError, match="prefix_keys"):
        attention_distance(torch.ones(1, 1, 6, 6) / 6, (2, 3), 1, 0, prefix_keys="keep")


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_attention_maps_of_a_model(classifier, tiny_vit):
    model = tiny_vit(classifier=classifier)
    model.train()
    x = torch.randn(3, 3, 16, 16)
    maps = attention_maps(model, x)
    t = 16 + (classifier == "token")
    assert len(maps) == 2 and all(m.shape == (3, 2, t, t) for m in maps)
    assert model.training  # mode restored
    assert torch.allclose(maps[0].sum(-1), torch.ones(3, 2, t), atol=1e-5)
    masks = rollout_masks(model, x)
    assert masks.shape == (3, 4, 4)
    assert torch.allclose(masks.sum((1, 2)), torch.ones(3, dtype=torch.float64))


def test_hybrid_distances_are_in_input_pixels(tiny_vit):
    model = tiny_vit(img_size=32, patch_size=1, resnet_layers=(1,), resnet_width=0.5)
    assert model.config.input_stride == 4 and model.config.grid_size == (8, 8)
    x = torch.randn(2, 3, 32, 32)
    result = inspect_model(model, x, batch_size=1)
    assert result["grid"] == (8, 8) and result["input_stride"] == 4
    assert result["filter_components"] is None  # 1x1 patches on features are no images
    # uniform attention on this grid would give the mean pairwise distance in input pixels
    assert brute_mean_pairwise((8, 8), 4) == pytest.approx(
        attention_distance(torch.full((1, 1, 65, 65), 1 / 65), (8, 8), 4, 1)[0, 0].item()
    )
    d = result["mean_attention_distance"]
    assert d.shape == (2, 2) and torch.all(d > 0) and torch.all(d < 32 * math.sqrt(2))


def test_inspect_model_batches_agree(tiny_vit):
    model = tiny_vit()
    x = torch.randn(5, 3, 16, 16)
    one = inspect_model(model, x, batch_size=5, rollout_images=5)
    many = inspect_model(model, x, batch_size=2, rollout_images=5)
    assert torch.allclose(one["mean_attention_distance"], many["mean_attention_distance"])
    assert torch.allclose(one["rollout"][1], many["rollout"][1])
    assert many["rollout"][1].shape == (5, 4, 4)


def test_auto_batch_size_bounds_attention_memory():
    from vitkit.inspect.probe import auto_batch_size

    assert auto_batch_size(3, 4, 17) == 16  # tiny models: the cap
    assert auto_batch_size(24, 16, 577) == 2  # ViT-L/16 at 384: 0.5 GB of maps per image
    assert auto_batch_size(32, 16, 1297) == 1  # never 0
