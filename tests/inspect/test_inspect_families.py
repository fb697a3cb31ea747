"""Inspection of today's ViT families: register tokens are left out of the rollout's patch maps and of the
attention distances, heads that read the patches ('map', the patch half of 'token_gap') get the rollout GAP models
get, and the position-embedding figure reads the patch rows whether or not the prefix tokens have rows."""

from __future__ import annotations

import pytest
import torch

import vitkit
from families import build_tiny_family
from vitkit.data.transforms import normalise
from vitkit.inspect import inspect_model, rollout_masks, rollout_to_patches
from vitkit.inspect.embeddings import position_embedding_table, position_similarity
from vitkit.inspect.html_report import render_report
from vitkit.inspect.probe import summary_json

GRID, PATCHES, REGISTERS = (2, 3), 6, 4


def joint_with_registers(class_token: bool) -> torch.Tensor:
    """A rollout [1, T, T] with known answers: the class token draws on patch 0 alone, every register on patch
    5 alone, every patch uniformly on all patches."""
    prefix = int(class_token) + REGISTERS
    joint = torch.zeros(1, prefix + PATCHES, prefix + PATCHES, dtype=torch.float64)
    if class_token:
        joint[0, 0, prefix] = 1
    joint[0, int(class_token) : prefix, prefix + 5] = 1
    joint[0, prefix:, prefix:] = 1 / PATCHES
    return joint


@pytest.mark.parametrize("classifier", ["gap", "map"])
def test_pooled_heads_read_the_patch_rows_not_the_registers(classifier):
    masks = rollout_to_patches(joint_with_registers(False), GRID, REGISTERS, classifier)
    torch.testing.assert_close(masks, torch.full((1, *GRID), 1 / PATCHES, dtype=torch.float64))


def test_class_token_rows_with_registers():
    joint = joint_with_registers(True)
    token = rollout_to_patches(joint, GRID, 1 + REGISTERS, "token").flatten()
    torch.testing.assert_close(token, torch.eye(PATCHES, dtype=torch.float64)[0])
    both = rollout_to_patches(joint, GRID, 1 + REGISTERS, "token_gap").flatten()
    expected = (torch.eye(PATCHES, dtype=torch.float64)[0] + 1 / PATCHES) / 2  # class token and patch mean
    torch.testing.assert_close(both, expected)
    with pytest.raises(ValueError, match="needs a class token"):
        rollout_to_patches(joint[:, 1 + REGISTERS :, 1 + REGISTERS :], GRID, 0, "token_gap")


@pytest.mark.parametrize(
    "kind, overrides, shown",
    [
        ("dinov2_reg", {}, "from the class token to the patches; the 4 register token(s) are left out"),
        ("dinov2_reg", {"classifier": "token_gap"}, "the class token and the mean of the patch tokens"),
        ("siglip", {}, "attention-pooling head reads the patches"),
    ],
)
def test_inspect_of_a_family_model_says_what_its_rollout_shows(kind, overrides, shown):
    model = build_tiny_family(kind, **overrides)
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    masks = rollout_masks(model, normalise(x, model.config.mean_std))  # inspect reads x as the weights expect
    assert masks.shape == (3, 4, 4)
    torch.testing.assert_close(masks.sum((1, 2)), torch.ones(3, dtype=torch.float64))
    result = inspect_model(model, x, rollout_images=2)
    torch.testing.assert_close(result["rollout"][1], masks[:2])
    assert result["mean_attention_distance"].shape == (2, 3)
    summary = summary_json(result, model.config.to_dict())
    assert shown in summary["rollout_note"] and "register" in summary["mean_attention_distance_notes"]
    assert shown in render_report({}, summary)


@pytest.mark.parametrize("kind", ["deit3", "dinov2_reg"])
def test_position_figure_without_prefix_rows_reads_every_row(kind):
    """The table is what the model adds to the patches: the whole table when the prefix has no rows."""
    model = build_tiny_family(kind)
    table, grid = position_embedding_table(model)
    assert grid == (4, 4) and torch.equal(table, model.pos_embed.weight[0].detach())
    added = model.add_position(torch.zeros(1, 16, 48), grid)[0, model.config.num_prefix_tokens :]
    torch.testing.assert_close(table, added.detach())
    assert position_similarity(model).shape == (4, 4, 4, 4)


def test_position_figure_with_prefix_rows_skips_them():
    model = build_tiny_family("clip")  # a row for the class token
    table, _ = position_embedding_table(model)
    assert torch.equal(table, model.pos_embed.weight[0, 1:].detach())


def test_fixed_sincos_table_without_prefix_rows():
    model = build_tiny_family("deit3", pos_embed="sincos")
    table, grid = position_embedding_table(model)
    added = model.add_position(torch.zeros(1, 16, 48), grid)[0, 1:]
    torch.testing.assert_close(table, added)


def test_inspect_reads_the_images_normalised_as_the_weights_expect():
    """The figures show the [-1, 1] pixels; the model reads them with its weights' mean and std."""
    import copy

    from vitkit.inspect.probe import inspect_model
    from vitkit.models.registry import IMAGENET_MEAN, IMAGENET_STD

    torch.manual_seed(0)
    model = vitkit.create_model(
        "ViT-Ti/16", depth=1, img_size=32, patch_size=8, image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD
    ).eval()
    plain = copy.deepcopy(model)
    plain.config.image_mean = plain.config.image_std = None
    images = torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        ours = inspect_model(model, images, rollout_images=2)
        expected = inspect_model(plain, normalise(images, model.config.mean_std), rollout_images=2)
    torch.testing.assert_close(ours["mean_attention_distance"], expected["mean_attention_distance"])
    torch.testing.assert_close(ours["rollout"][1], expected["rollout"][1])
    assert torch.equal(ours["rollout"][0], images)
