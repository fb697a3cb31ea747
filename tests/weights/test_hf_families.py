"""transformers' vision towers of today's families both ways: Dinov2Model (also with SwiGLU),
Dinov2WithRegistersModel, CLIPVisionModel, CLIPVisionModelWithProjection, SiglipVisionModel. Random weights,
each tower built at the image size it is run at, so that transformers resamples no position table."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.models.registry import model_config
from vitkit.storage import save_state_dict

from .conftest import max_abs, randomize

transformers = pytest.importorskip("transformers")

# float32: the same network, only the order of operations differs: 1e-5 of the outputs' scale (SigLIP-B's pooled
# features reach ~5, and 12 layers of round-off ~1e-5 absolute); float64 shows that nothing but round-off differs,
# to 1e-6 with registers: vitkit's class token holds its sum with the position row, rounded to float32 once
ATOL, ATOL_FLOAT64, ATOL_FLOAT64_FOLDED = 1e-5, 1e-10, 1e-6
SMALL = dict(hidden_size=192, num_attention_heads=3, num_hidden_layers=2)  # the maps are per layer and width
# case -> (transformers class, its config class, image size, config options, the vitkit name it is)
TOWERS = {
    "dinov2": ("Dinov2Model", "Dinov2Config", 56, dict(patch_size=14), "DINOv2-B/14"),
    "dinov2-swiglu": (
        "Dinov2Model",
        "Dinov2Config",
        56,
        dict(patch_size=14, use_swiglu_ffn=True),
        "DINOv2-g/14",
    ),
    "dinov2-reg4": (
        "Dinov2WithRegistersModel",
        "Dinov2WithRegistersConfig",
        56,
        dict(patch_size=14),
        "DINOv2-B/14-reg4",
    ),
    "clip": ("CLIPVisionModel", "CLIPVisionConfig", 64, dict(patch_size=16), "CLIP-B/16-quickgelu"),
    "clip-projection": (
        "CLIPVisionModelWithProjection",
        "CLIPVisionConfig",
        64,
        dict(patch_size=16, projection_dim=32),
        "CLIP-B/16-quickgelu",
    ),
    "siglip": ("SiglipVisionModel", "SiglipVisionConfig", 64, dict(patch_size=16), "SigLIP-B/16"),
}


def random_tower(case: str, small: bool = True) -> torch.nn.Module:
    """The transformers tower of `case`, every parameter random (LayerScale around 1, so every branch counts)."""
    cls, config_cls, size, options, _ = TOWERS[case]
    width = dict(intermediate_size=768) if small and not cls.startswith("Dinov2") else {}
    config = getattr(transformers, config_cls)(
        image_size=size, **options, **(SMALL if small else {}), **width
    )
    model = randomize(getattr(transformers, cls)(config))
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("lambda1"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    return model


def images(size: int) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(2))


def pooled(tower: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """transformers' pooler_output (the projection model's is its vision model's)."""
    return getattr(tower, "vision_model", tower)(pixel_values=x).pooler_output


def check_both_ways(case: str, small: bool = True) -> vitkit.VisionTransformer:
    """from_hf's pre-logits output equals pooler_output; to_hf gives the class back, whose state dict loads
    strictly into a fresh model of that class with the same pooler_output."""
    source = random_tower(case, small)
    cls, _, size, _, _ = TOWERS[case]
    model = vitkit.from_hf(source)
    back = vitkit.to_hf(model)
    assert type(back).__name__ == cls
    fresh = type(back)(back.config).eval()
    fresh.load_state_dict(back.state_dict(), strict=True)
    x = images(size)
    with torch.no_grad():
        expected, got = pooled(source, x), model(x, pre_logits=True)
        returned = pooled(fresh, x)
        atol = ATOL * max(1.0, expected.abs().max().item())
        print(
            f"\n{case}: from_hf {max_abs(got, expected):.2e}, to_hf {max_abs(returned, got):.2e}, atol {atol:.1e}"
        )
        assert max_abs(got, expected) <= atol
        assert max_abs(returned, got) <= atol
        if cls == "CLIPVisionModelWithProjection":
            assert max_abs(model(x), source(pixel_values=x).image_embeds) <= atol
        if not small:  # float64 at two layers shows it; here it would only double the time
            return model
        x = x.double()
        exact = (model.double()(x, pre_logits=True) - pooled(source.double(), x)).abs().max().item()
        print(f"{case}: from_hf in float64 {exact:.2e}")
        assert exact <= (ATOL_FLOAT64_FOLDED if model.config.num_reg_tokens else ATOL_FLOAT64)
    return model.float()


@pytest.mark.parametrize("case", list(TOWERS))
def test_tower_matches_transformers_both_ways(case: str) -> None:
    """Two layers, 192 wide; the config is the registry's family config (but for its starting LayerScale,
    which trained scales do not record, and SigLIP's GELU: transformers' tanh form, timm's erf)."""
    model = check_both_ways(case)
    c = model.config
    dims = dict(hidden_size=c.hidden_size, depth=c.depth, num_heads=c.num_heads, mlp_dim=c.mlp_dim)
    expected = model_config(TOWERS[case][4], **dims, img_size=c.img_size, num_classes=c.num_classes)
    for field in dataclasses.fields(expected):
        if field.name not in ("layer_scale", "activation"):
            assert getattr(c, field.name) == getattr(expected, field.name), field.name
    assert c.activation == {"siglip": "gelu_tanh", "dinov2-swiglu": "swiglu"}.get(case, expected.activation)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["dinov2", "dinov2-reg4", "clip", "siglip"])
def test_full_size_tower_matches_transformers(case: str) -> None:
    """ViT-B: 12 layers, 768 wide (DINOv2 at 56 pixels: its 518 changes nothing the table maps)."""
    model = check_both_ways(case, small=False)
    assert (model.config.depth, model.config.hidden_size) == (12, 768)


def test_headless_deit3_is_a_dinov2_model() -> None:
    """Position rows for the patches only and no registers: a Dinov2Model whose class token has a zero row."""
    model = randomize(vitkit.create_model("DeiT3-S/16", depth=2, num_classes=0, img_size=64))
    converted = vitkit.to_hf(model)
    assert type(converted).__name__ == "Dinov2Model"
    assert not converted.embeddings.position_embeddings[0, 0].any()
    x = images(64)
    with torch.no_grad():
        assert max_abs(converted(pixel_values=x).pooler_output, model(x, pre_logits=True)) <= ATOL


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("DINOv2-S/14", dict(classifier="token_gap"), "classifier 'token_gap'"),
        ("DeiT3-S/16", {}, "a 1000-class head"),
        ("DINOv2-S/14-reg4", dict(prefix_pos_embed=True), "position rows for the register tokens"),
        ("DINOv2-S/14", dict(activation="swiglu", mlp_dim=100), "no integer mlp_ratio"),
        ("CLIP-B/16", dict(patch_bias=True), "a patch embedding with bias"),
        ("CLIP-B/16", dict(num_reg_tokens=4, prefix_pos_embed=False), "register tokens"),
        ("SigLIP-B/16", dict(num_classes=10), "a 10-class head"),
        ("SigLIP-B/16", dict(activation="swiglu"), "a SwiGLU MLP"),
        ("ViT-S/16", dict(num_reg_tokens=4), "register tokens (transformers' ViT has none)"),
        ("ViT-S/16", dict(activation="swiglu"), "activation 'swiglu'"),
    ],
)
def test_to_hf_refuses_what_a_tower_cannot_hold(name: str, overrides: dict, message: str) -> None:
    narrow = {"hidden_size": 96, "num_heads": 3, "mlp_dim": 384, **overrides}
    model = vitkit.create_model(name, depth=1, img_size=56 if "/14" in name else 64, **narrow)
    with pytest.raises(ValueError, match=f"^to_hf: cannot represent .*{re.escape(message)}") as error:
        vitkit.to_hf(model)
    assert "\n" not in str(error.value)


def test_siglip_without_its_head_is_refused() -> None:
    config = transformers.SiglipVisionConfig(
        **SMALL, intermediate_size=768, image_size=32, vision_use_head=False
    )
    with pytest.raises(ValueError, match="vision_use_head=False"):
        vitkit.from_hf(transformers.SiglipVisionModel(config))


def legacy_names(case: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers 4.x names: DINOv2's attention.attention.query..., SwiGLU's weights_in / weights_out, and the
    vision_model. prefix of CLIPVisionModel and SiglipVisionModel."""
    if not case.startswith("dinov2"):
        return {f"vision_model.{k}": v for k, v in state.items()}
    old = {}
    for key, value in state.items():
        for new, v4 in (
            ("attention.q_proj", "attention.attention.query"),
            ("attention.k_proj", "attention.attention.key"),
            ("attention.v_proj", "attention.attention.value"),
            ("attention.o_proj", "attention.output.dense"),
            ("mlp.down_proj", "mlp.weights_out"),
        ):
            key = key.replace(new, v4)
        if ".mlp.up_proj." in key:
            continue
        if ".mlp.gate_proj." in key:
            value = torch.cat([value, state[key.replace("gate_proj", "up_proj")]])
            key = key.replace("gate_proj", "weights_in")
        old[key] = value
    return old


@pytest.mark.parametrize("case", ["dinov2-swiglu", "dinov2-reg4", "clip", "siglip"])
def test_directories_and_legacy_state_dicts(case: str, tmp_path: Path) -> None:
    """load_weights of a save_pretrained directory (config.json says the GELU, epsilon and heads) and of a bare
    state dict with the 4.x names (transformers' defaults: these towers have them)."""
    source = random_tower(case)
    size = TOWERS[case][2]
    source.save_pretrained(tmp_path / "hf")
    state = legacy_names(case, source.state_dict())
    assert any(k.startswith("vision_model.") or "attention.attention.query" in k for k in state)
    save_state_dict(state, tmp_path / "v4.safetensors")
    x = images(size)
    with torch.no_grad():
        expected = pooled(source, x)
        for path in (tmp_path / "hf", tmp_path / "v4.safetensors"):
            model = vitkit.load_weights(path, num_heads=3)
            assert max_abs(model(x, pre_logits=True), expected) <= ATOL, path.name
