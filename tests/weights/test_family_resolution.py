"""Today's ViT families at a new resolution (§3.2): loading with `img_size=`, the fine-tuning recipe and
`dynamic_img_size` inputs resample only the patch rows of the position table; class and register tokens, and
the class token's own position row (CLIP), stay bitwise as stored."""

from __future__ import annotations

import pytest
import torch

import vitkit
from families import build_tiny_family
from vitkit.models.posemb import resample_position_embedding
from vitkit.recipe.resolve import apply_overrides
from vitkit.recipe.run_config import finetune_defaults
from vitkit.training.build import build_run_model
from vitkit.training.objectives import objective_for

# DeiT III: no position rows for the prefix; DINOv2 with registers: neither; CLIP: a row for the class token
KINDS = ["deit3", "dinov2_reg", "clip"]
NEW_SIZE, NEW_GRID = 48, (6, 6)  # from 32 px in 8 px patches: 4x4 -> 6x6


def check_resampled(source: vitkit.VisionTransformer, model: vitkit.VisionTransformer) -> None:
    """Patch rows as resample_position_embedding makes them, prefix rows and tokens untouched."""
    config = source.config
    prefix = config.num_pos_prefix_tokens
    table = source.pos_embed.weight.detach()
    expected = resample_position_embedding(table, prefix, config.grid_size, NEW_GRID)
    assert model.pos_embed.weight.shape == (1, prefix + 36, config.hidden_size)
    assert torch.equal(model.pos_embed.weight, expected)
    assert torch.equal(model.pos_embed.weight[:, :prefix], table[:, :prefix])
    for name in ("cls_token", "reg_token"):
        kept, stored = getattr(model, name), getattr(source, name)
        assert (kept is None) == (stored is None), name
        if stored is not None:
            assert torch.equal(kept, stored), name


@pytest.mark.parametrize("kind", KINDS)
def test_img_size_override_resamples_patch_rows_only(kind, tmp_path):
    source = build_tiny_family(kind)
    model = vitkit.load_weights(source.save_pretrained(tmp_path / "w"), img_size=NEW_SIZE)
    assert model.config.grid_size == NEW_GRID and model.config.num_reg_tokens == source.config.num_reg_tokens
    check_resampled(source, model)


@pytest.mark.parametrize("kind", KINDS)
def test_finetune_recipe_at_a_new_resolution_keeps_the_tokens(kind, tmp_path):
    source = build_tiny_family(kind)
    source.save_pretrained(tmp_path / "w")
    config = apply_overrides(
        finetune_defaults(), [f"model.weights={tmp_path / 'w'}", f"model.img_size={NEW_SIZE}"]
    )
    config.validate()
    model = build_run_model(config, objective_for(config.train), ["a", "b"], None)
    assert model.config.img_size == (NEW_SIZE, NEW_SIZE) and not model.head.weight.any()
    check_resampled(source, model)


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_img_size_equals_the_model_resampled_to_that_size(kind, tmp_path):
    dynamic = build_tiny_family(kind, dynamic_img_size=True)
    resized = vitkit.load_weights(dynamic.save_pretrained(tmp_path / "w"), img_size=NEW_SIZE)
    x = torch.randn(2, 3, NEW_SIZE, 32, generator=torch.Generator().manual_seed(0))  # non-square too
    with torch.no_grad():
        assert dynamic(x).shape == (2, dynamic.config.num_classes)
        x = torch.randn(2, 3, NEW_SIZE, NEW_SIZE, generator=torch.Generator().manual_seed(1))
        torch.testing.assert_close(dynamic(x), resized(x), rtol=0, atol=1e-5)
