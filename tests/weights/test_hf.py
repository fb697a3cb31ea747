"""transformers round trips: ViT-B/16 (eps 1e-12 carried), tanh GELU, pre-logits as pooler, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.storage import save_state_dict
from vitkit.weights.hf import _V4_NAMES

from .conftest import DATA, max_abs, randomize

transformers = pytest.importorskip("transformers")
TOL = dict(atol=1e-4, rtol=1e-4)


def hf_vit_b16(**kwargs: object) -> torch.nn.Module:
    """ViT-B/16 in transformers, two layers, random; transformers' own defaults (eps 1e-12, erf GELU)."""
    config = transformers.ViTConfig(num_hidden_layers=2, num_labels=10, **kwargs)
    return randomize(transformers.ViTForImageClassification(config))


def images(size: int = 224) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(2))


@pytest.mark.slow
def test_from_hf_vit_b16_carries_epsilon() -> None:
    source = hf_vit_b16()
    model = vitkit.from_hf(source)
    assert (model.config.layer_norm_eps, model.config.activation, model.config.num_heads) == (
        1e-12,
        "gelu",
        12,
    )
    x = images()
    with torch.no_grad():
        expected, got = source(x).logits, model(x)
    print(f"\nfrom_hf vit_b16: logits {max_abs(got, expected):.2e}")
    torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.slow
def test_to_hf_vit_b16_loads_strictly() -> None:
    model = randomize(vitkit.create_model("ViT-B/16", depth=2, num_classes=10))  # eps 1e-6, as the paper
    converted = vitkit.to_hf(model)
    assert converted.config.layer_norm_eps == 1e-6
    stock = transformers.ViTForImageClassification(converted.config).eval()
    stock.load_state_dict(converted.state_dict(), strict=True)
    x = images()
    with torch.no_grad():
        expected, got, got_stock = model(x), converted(x).logits, stock(x).logits
    print(f"\nto_hf vit_b16: logits {max_abs(got, expected):.2e}")
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(got_stock, expected, **TOL)
    with torch.no_grad():
        torch.testing.assert_close(vitkit.from_hf(converted)(x), expected, **TOL)


def test_official_weights_through_transformers() -> None:
    """Case B (pre-logits) as a head-less ViTModel whose pooler output is the official pre_logits vector."""
    import numpy as np

    from .conftest import nchw, official_io

    model = vitkit.load_weights(DATA / "B_params.npz", num_classes=0, keep_pre_logits=True)
    converted = vitkit.to_hf(model)
    assert type(converted).__name__ == "ViTModel" and converted.config.hidden_act == "gelu_pytorch_tanh"
    io = official_io("B")
    with torch.no_grad():
        pooled = converted(nchw(io["inputs"])).pooler_output
    print(f"\nB via transformers pooler: pre_logits {max_abs(pooled, io['pre_logits']):.2e}")
    np.testing.assert_allclose(pooled.numpy(), io["pre_logits"], atol=1e-5, rtol=1e-5)
    back = vitkit.from_hf(converted)
    assert back.config.representation_size == 48 and back.config.num_classes == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(classifier="gap"), "always classifies from the class token"),
        (dict(resnet_layers=(1,), patch_size=1), "no hybrid"),
        (dict(representation_size=16), "pre-logits and a head"),
        (dict(pos_embed="sincos"), "pos_embed 'sincos'"),
    ],
)
def test_to_hf_refuses_what_transformers_cannot_hold(overrides: dict, message: str, tiny_vit) -> None:
    model = tiny_vit(**overrides)
    with pytest.raises(ValueError, match=message):
        vitkit.to_hf(model)


@pytest.mark.slow
def test_legacy_transformers_names_and_directories(tmp_path: Path) -> None:
    source = hf_vit_b16(image_size=64, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    x = images(64)
    with torch.no_grad():
        expected = source(x).logits
    v4 = {}
    for key, value in source.state_dict().items():  # back to transformers 4.x names
        for old, new in reversed(_V4_NAMES):
            key = key.replace(new, old) if key.startswith("vit.") else key
        v4[key] = value
    assert "vit.encoder.layer.0.attention.attention.query.weight" in v4
    save_state_dict(v4, tmp_path / "v4.safetensors")
    model = vitkit.load_weights(tmp_path / "v4.safetensors", activation="gelu_tanh", layer_norm_eps=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, **TOL)
    source.save_pretrained(tmp_path / "hf_dir")  # config.json tells the epsilon, GELU and heads
    model = vitkit.load_weights(tmp_path / "hf_dir")
    assert (model.config.activation, model.config.layer_norm_eps) == ("gelu_tanh", 1e-6)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, **TOL)


def test_headless_vit_model_without_pooler() -> None:
    config = transformers.ViTConfig(
        hidden_size=48,
        num_hidden_layers=1,
        num_attention_heads=3,
        intermediate_size=96,
        image_size=32,
        patch_size=8,
        hidden_act="gelu_new",
    )
    source = randomize(transformers.ViTModel(config, add_pooling_layer=False))
    model = vitkit.from_hf(source)
    assert model.config.num_classes == 0 and model.config.activation == "gelu_tanh"
    x = images(32)
    with torch.no_grad():
        expected = source(x).last_hidden_state[:, 0]
        torch.testing.assert_close(model(x), expected, **TOL)
        back = vitkit.to_hf(model)
        assert type(back).__name__ == "ViTModel" and back.pooler is None
        torch.testing.assert_close(back(x).last_hidden_state[:, 0], expected, **TOL)
