"""timm round trips: ViT-B/16, a GAP ViT, pre-logits and the R50+ViT-B/16 and R26+ViT-S/32 hybrids, live models and
files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.storage import save_state_dict

from .conftest import max_abs, randomize

timm = pytest.importorskip("timm")

TOL = dict(atol=1e-4, rtol=1e-4)
# key -> (timm name, timm kwargs, vitkit name, vitkit overrides, image size); depth 2 keeps the tests fast
MODELS = {
    "vit_b16": ("vit_base_patch16_224", {}, "ViT-B/16", {}, 224),
    "gap": (
        "vit_base_patch16_224",
        dict(class_token=False, global_pool="avg", fc_norm=False),
        "ViT-B/16",
        dict(classifier="gap"),
        64,
    ),
    "r50_hybrid": ("vit_base_r50_s16_224", {}, "R50+ViT-B/16", {}, 64),
    "r26_hybrid": ("vit_small_r26_s32_224", {}, "R26+ViT-S/32", {}, 64),
}


def timm_model(key: str, **extra: object) -> torch.nn.Module:
    name, kwargs, _, _, size = MODELS[key]
    return timm.create_model(
        name, pretrained=False, depth=2, num_classes=10, img_size=size, **kwargs, **extra
    )


def vitkit_model(key: str) -> torch.nn.Module:
    _, _, name, overrides, size = MODELS[key]
    return vitkit.create_model(name, depth=2, num_classes=10, img_size=size, **overrides)


# ViT-B/16 at 224 and the hybrid's ResNet take seconds each: the default run covers the GAP model only.
KEYS = [
    "gap",
    pytest.param("vit_b16", marks=pytest.mark.slow),
    pytest.param("r50_hybrid", marks=pytest.mark.slow),
    "r26_hybrid",
]


class Built(dict):
    """Random models built on first use and kept for the module, so a run builds only the ones it tests."""

    def __init__(self, build) -> None:
        super().__init__()
        self.build = build

    def __missing__(self, key: str) -> torch.nn.Module:
        self[key] = model = randomize(self.build(key))
        return model


@pytest.fixture(scope="module")
def timm_models() -> dict[str, torch.nn.Module]:
    return Built(timm_model)


@pytest.fixture(scope="module")
def vitkit_models() -> dict[str, torch.nn.Module]:
    return Built(vitkit_model)


def inputs(key: str) -> torch.Tensor:
    size = MODELS[key][4]
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("key", KEYS)
def test_from_timm(key: str, timm_models: dict[str, torch.nn.Module]) -> None:
    source = timm_models[key]
    model = vitkit.from_timm(source)
    x = inputs(key)
    with torch.no_grad():
        expected, got = source(x), model(x)
    print(f"\nfrom_timm {key}: logits {max_abs(got, expected):.2e}")
    torch.testing.assert_close(got, expected, **TOL)
    assert model.config.num_heads == source.blocks[0].attn.num_heads and model.config.activation == "gelu"


@pytest.mark.parametrize("key", KEYS)
def test_to_timm_loads_strictly_into_stock_timm(key: str, vitkit_models: dict[str, torch.nn.Module]) -> None:
    model = vitkit_models[key]
    converted = vitkit.to_timm(model)
    stock = timm_model(key).eval()
    stock.load_state_dict(converted.state_dict(), strict=True)
    x = inputs(key)
    with torch.no_grad():
        expected, got, got_stock = model(x), converted(x), stock(x)
    print(
        f"\nto_timm {key}: logits {max_abs(got, expected):.2e}, stock timm {max_abs(got_stock, expected):.2e}"
    )
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(got_stock, expected, **TOL)
    back = vitkit.from_timm(converted)
    with torch.no_grad():
        torch.testing.assert_close(back(x), expected, **TOL)


def test_pre_logits_travel_as_a_head_sequential() -> None:
    model = randomize(
        vitkit.create_model(
            "ViT-Ti/16", depth=2, img_size=32, num_classes=7, representation_size=24, activation="gelu_tanh"
        )
    )
    converted = vitkit.to_timm(model)
    assert set(dict(converted.head.named_children())) == {"pre_logits", "act", "fc"}
    x = torch.randn(2, 3, 32, 32)
    back = vitkit.from_timm(converted)
    assert back.config.representation_size == 24 and back.config.activation == "gelu_tanh"
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), **TOL)
        torch.testing.assert_close(back(x), model(x), **TOL)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(global_pool="token", fc_norm=True), "fc_norm"),
        (dict(global_pool="avg", fc_norm=False), "with a class token"),
        (dict(qk_norm=True), "qk-norm"),
        (dict(global_pool="max", class_token=False, fc_norm=False), "global_pool='max'"),
    ],
)
def test_unrepresentable_timm_models_are_refused(kwargs: dict, message: str) -> None:
    source = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=1, img_size=32, **kwargs)
    with pytest.raises(ValueError, match=message):
        vitkit.from_timm(source)


@pytest.mark.parametrize(
    ("key", "suffix"),
    [
        ("gap", ".pth"),
        ("gap", ".safetensors"),
        pytest.param("r50_hybrid", ".safetensors", marks=pytest.mark.slow),
    ],
)
def test_timm_state_dict_files(
    key: str, suffix: str, tmp_path: Path, timm_models: dict[str, torch.nn.Module]
) -> None:
    source = timm_models[key]
    path = tmp_path / f"timm{suffix}"
    if suffix == ".pth":
        torch.save({"state_dict": source.state_dict(), "epoch": 3}, path)  # a training checkpoint
    else:
        save_state_dict(source.state_dict(), path)
    model = vitkit.load_weights(path)
    x = inputs(key)
    with torch.no_grad():
        torch.testing.assert_close(model(x), source(x), **TOL)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["vit_b16", "r50_hybrid"])
def test_full_depth_at_224(key: str) -> None:
    name = MODELS[key][0]
    source = randomize(timm.create_model(name, pretrained=False))
    model = vitkit.from_timm(source)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), source(x), **TOL)
        torch.testing.assert_close(vitkit.to_timm(model)(x), source(x), **TOL)
