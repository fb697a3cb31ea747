"""Today's ViT families both ways with timm: DINOv2 (with and without registers, and the SwiGLU of DINOv2-g),
CLIP (GELU and QuickGELU), SigLIP and SigLIP 2 (one architecture), DeiT III. Each made by timm's own constructor
with random weights, at its native resolution and at another one."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import vitkit
from vitkit.models.registry import MODELS, model_config

from .conftest import randomize

timm = pytest.importorskip("timm")

ATOL = 1e-5  # float32: the same network, only the order of operations differs
# vitkit name -> (timm architecture, native size, other size)
FAMILIES = {
    "DINOv2-S/14": ("vit_small_patch14_dinov2", 518, 224),
    "DINOv2-B/14": ("vit_base_patch14_dinov2", 518, 224),
    "DINOv2-S/14-reg4": ("vit_small_patch14_reg4_dinov2", 518, 224),
    "DINOv2-B/14-reg4": ("vit_base_patch14_reg4_dinov2", 518, 224),
    "CLIP-B/16": ("vit_base_patch16_clip_224", 224, 160),
    "CLIP-B/16-quickgelu": ("vit_base_patch16_clip_quickgelu_224", 224, 160),
    "CLIP-B/32": ("vit_base_patch32_clip_224", 224, 384),
    "SigLIP-B/16": ("vit_base_patch16_siglip_224", 224, 160),
    "DeiT3-S/16": ("deit3_small_patch16_224", 224, 160),
    "DeiT3-B/16": ("deit3_base_patch16_224", 224, 160),
}


SLOW = {("DINOv2-B/14", "native"), ("DINOv2-B/14-reg4", "native")}


def random_timm(name: str, size: int, **kwargs: object) -> torch.nn.Module:
    """timm's model with every parameter random; LayerScale around 1 so that every branch counts."""
    model = randomize(timm.create_model(name, pretrained=False, img_size=size, **kwargs))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("gamma"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
    return model


def check_both_ways(name: str, size: int, atol: float = ATOL, **kwargs: object) -> vitkit.VisionTransformer:
    """from_timm equals timm; to_timm's state dict loads strictly into a stock timm model that equals it."""
    source = random_timm(name, size, **kwargs)
    model = vitkit.from_timm(source)
    back = vitkit.to_timm(model)
    stock = timm.create_model(name, pretrained=False, img_size=size, **kwargs).eval()
    stock.load_state_dict(back.state_dict(), strict=True)
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = source(x)
        assert (model(x) - expected).abs().max().item() <= atol
        assert (model.forward_head(model.forward_features(x)) - expected).abs().max().item() <= atol
        assert (stock(x) - expected).abs().max().item() <= atol
    return model


# The B-sized DINOv2 at 518 px (1,370 tokens) take seconds even at two layers: with the slow tests.
CASES = [
    pytest.param(name, resolution, marks=[pytest.mark.slow] if (name, resolution) in SLOW else [])
    for name in FAMILIES
    for resolution in ("native", "other")
]


@pytest.mark.parametrize(("vitkit_name", "resolution"), CASES)
def test_family_matches_timm_both_ways(vitkit_name: str, resolution: str) -> None:
    """Two layers of each family (the parts are per layer; the full depth runs in the slow test below)."""
    name, native, other = FAMILIES[vitkit_name]
    model = check_both_ways(name, native if resolution == "native" else other, depth=2)
    expected = model_config(vitkit_name, depth=2, img_size=model.config.img_size)
    for field in dataclasses.fields(expected):
        if field.name != "layer_scale":  # only its starting value, which trained scales do not record
            assert getattr(model.config, field.name) == getattr(expected, field.name), field.name


def test_swiglu_of_dinov2_giant_matches_timm() -> None:
    # 1536 wide: outputs around 10, so float32's order-of-operations differences reach 1e-5 absolute
    model = check_both_ways("vit_giant_patch14_dinov2", 56, atol=3e-5, depth=1)
    assert model.config.activation == "swiglu" and model.config.mlp_dim == 4096


def test_registry_names_every_family_with_timm_aliases() -> None:
    assert {"DINOv2-B/14-reg4", "CLIP-B/16", "SigLIP-B/16", "SigLIP2-B/16", "DeiT3-B/16"} <= set(MODELS)
    assert vitkit.list_models("vit_base_patch14_reg4_dinov2") == ["DINOv2-B/14-reg4"]
    assert model_config("SigLIP2-B/16") == model_config("SigLIP-B/16")


@pytest.mark.slow
@pytest.mark.parametrize(
    "vitkit_name", ["DINOv2-B/14-reg4", "CLIP-B/16-quickgelu", "SigLIP-B/16", "DeiT3-B/16"]
)
def test_full_depth_family_matches_timm(vitkit_name: str) -> None:
    name, native, _ = FAMILIES[vitkit_name]
    check_both_ways(name, native)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(qk_norm=True), "qk-norm"),
        (dict(global_pool="avg"), "with a class token"),
        (dict(class_token=False, global_pool="map", mlp_layer=None), None),
    ],
)
def test_what_timm_can_and_cannot_hand_over(kwargs: dict, message: str | None) -> None:
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1, img_size=32, **kwargs)
    if message is None:
        assert vitkit.from_timm(source).config.classifier == "map"
    else:
        with pytest.raises(ValueError, match=message):
            vitkit.from_timm(source)
