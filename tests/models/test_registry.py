"""Named variants: exact parameter counts (Table 1 and the official code), both naming styles, every entry runs."""

import pytest
import torch

import vitkit
from tiny import build_tiny_vit
from vitkit.flops import count_flops, count_parameters
from vitkit.models.registry import MODELS

# The counts the official vision_transformer tests pin, all with 1000 classes.
OFFICIAL_COUNTS = {
    "ViT-Ti/16": 5_717_416,
    "ViT-S/16": 22_050_664,
    "ViT-B/16": 86_567_656,
    "ViT-L/16": 304_326_632,
    "ViT-H/14": 632_045_800,
    "R50+ViT-B/16": 98_659_112,
}


@pytest.mark.parametrize("name, count", OFFICIAL_COUNTS.items())
def test_parameter_counts_match_the_official_code(name, count):
    assert count_parameters(vitkit.create_model(name, device="meta")) == count


@pytest.mark.parametrize(
    "paper, timm",
    [
        ("ViT-B/16", "vit_base_patch16_224"),
        ("ViT-H/14", "vit_huge_patch14_224"),
        ("R50+ViT-B/16", "vit_base_r50_s16_224"),
        ("R26+ViT-S/32", "vit_small_r26_s32_224"),
        ("R50x1", "resnetv2_50x1_bit"),
    ],
)
def test_paper_and_timm_names_resolve_to_the_same_config(paper, timm):
    assert vitkit.model_config(paper) == vitkit.model_config(timm)
    assert vitkit.model_config(paper.lower()) == vitkit.model_config(paper)


def test_list_models_matches_both_styles():
    assert "ViT-B/16" in vitkit.list_models()
    assert vitkit.list_models("vit_base_patch16_2*") == ["ViT-B/16"]
    assert vitkit.list_models("vit_base_patch16*") == [
        "ViT-B/16",
        "CLIP-B/16",
        "CLIP-B/16-quickgelu",
        "SigLIP-B/16",
    ]
    assert set(vitkit.list_models("R50+*")) == {
        "R50+ViT-B/16",
        "R50+ViT-L/16",
        "R50+ViT-B/32",
        "R50+ViT-L/32",
    }
    assert {"R50x1", "R50x2", "R101x1", "R152x1", "R152x2", "R200x3"} <= set(vitkit.list_models("R*x*"))


# One variant per family in the default run (the large ResNets take about a second each even on meta).
FAMILY_REPRESENTATIVES = ("ViT-B/16", "R50+ViT-B/16", "R50x1")


@pytest.mark.parametrize(
    "name", [n if n in FAMILY_REPRESENTATIVES else pytest.param(n, marks=pytest.mark.slow) for n in MODELS]
)
def test_every_variant_builds_and_runs_on_meta(name):
    model = vitkit.create_model(name, device="meta", num_classes=7)
    size = model.config.img_size
    out = model(torch.empty(2, model.config.in_chans, *size, device="meta"))
    assert out.shape == (2, 7)


@pytest.mark.parametrize(
    "name",
    [
        "ViT-Ti/16",
        pytest.param("R50+ViT-B/16", marks=pytest.mark.slow),
        pytest.param("R50x1", marks=pytest.mark.slow),
    ],
)
def test_small_real_forward(name):
    overrides = dict(img_size=64, num_classes=3)
    if name.startswith("R50+"):
        overrides.update(depth=1)
    model = vitkit.create_model(name, **overrides).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 3) and torch.isfinite(out).all()


def test_flops_of_vit_b16_include_attention():
    """35.1 GFLOPs: the math attention path is counted (fused CPU attention would give 33.7). The logits skip the
    last layer's 196 patch tokens: their query, projection and MLP rows, and their rows of the attention."""
    model = vitkit.create_model("ViT-B/16", device="meta")
    every_token = count_flops(model, (3, 224, 224), every_token=True)
    assert every_token / 1e9 == pytest.approx(35.13, abs=0.01)
    skipped = 196 * 2 * (768 * 768 + 768 * 768 + 2 * 768 * 3072) + 196 * 2 * (2 * 197 * 768)
    assert every_token - count_flops(model, (3, 224, 224)) == skipped


def test_as_model_finds_the_model_inside_its_wrappers():
    """The model itself, from under DistributedDataParallel (`.module`) and torch.compile (`._orig_mod`), nested
    either way; any other module is a one-line TypeError."""

    class Parallel(torch.nn.Module):  # DistributedDataParallel's shape without a process group
        def __init__(self, module: torch.nn.Module) -> None:
            super().__init__()
            self.module = module

    model = build_tiny_vit()
    for wrapped in (model, Parallel(model), torch.compile(model), Parallel(torch.compile(model))):
        assert vitkit.models.as_model(wrapped) is model
    with pytest.raises(TypeError, match="^Linear is not a vitkit model"):
        vitkit.models.as_model(Parallel(torch.nn.Linear(2, 3)))
