"""save_pretrained / from_pretrained: bitwise, atomic, run directories, overrides; raw vitkit state dicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.models.config import ResNetConfig
from vitkit.models.posemb import resample_position_embedding
from vitkit.storage import WEIGHTS_NAME, read_config

from .conftest import randomize

VARIANTS = {
    "token": dict(name="ViT-Ti/16", depth=2, img_size=32, num_classes=4),
    "gap_prelogits": dict(name="ViT-Ti/16", depth=1, img_size=32, classifier="gap", representation_size=8),
    "hybrid": dict(
        name="R50+ViT-B/16",
        depth=1,
        img_size=32,
        resnet_layers=(1,),
        hidden_size=48,
        num_heads=3,
        mlp_dim=96,
        num_classes=3,
    ),
    "learned_2d": dict(name="ViT-Ti/16", depth=1, img_size=(32, 48), pos_embed="learned_2d"),
    "relative": dict(name="ViT-Ti/16", depth=1, img_size=32, pos_embed="relative"),
}


def build(variant: str) -> torch.nn.Module:
    kwargs = dict(VARIANTS[variant])
    return randomize(vitkit.create_model(kwargs.pop("name"), **kwargs))


@pytest.mark.parametrize("variant", VARIANTS)
def test_round_trip_is_bitwise(variant: str, tmp_path: Path) -> None:
    model = build(variant)
    model.save_pretrained(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "config.json",
        WEIGHTS_NAME,
    ]  # no temp files
    back = vitkit.from_pretrained(tmp_path / "m")
    assert back.config == model.config and not back.training
    state = back.state_dict()
    assert state.keys() == model.state_dict().keys()
    for key, value in model.state_dict().items():
        assert torch.equal(state[key], value), key


def test_resnet_baseline_round_trip(tmp_path: Path) -> None:
    from vitkit.models.registry import build_model

    model = randomize(build_model(ResNetConfig(layers=(1, 1), num_classes=5, img_size=32)))
    vitkit.save_pretrained(model, tmp_path / "bit")
    back = vitkit.load_weights(tmp_path / "bit", num_classes=2)
    assert back.head.weight.shape[0] == 2 and not back.head.weight.any()
    assert torch.equal(back.conv_root.weight, model.conv_root.weight)


def test_run_directory_contract(tmp_path: Path) -> None:
    model = build("token")
    vitkit.save_pretrained(model, tmp_path / "run" / "final")
    vitkit.save_pretrained(build("relative"), tmp_path / "run")  # final/ wins over a top-level config
    loaded = vitkit.load_weights(tmp_path / "run")
    assert torch.equal(loaded.head.weight, model.head.weight)
    assert vitkit.load_weights(tmp_path / "run" / "final").config == model.config
    assert read_config(tmp_path / "run" / "final")["model_type"] == "vit"


def test_img_size_override_resamples_from_the_stored_non_square_grid(tmp_path: Path) -> None:
    model = build("token")
    model = vitkit.from_pretrained(model.save_pretrained(tmp_path / "a"), img_size=(32, 48))  # 2x2 -> 2x3
    model.save_pretrained(tmp_path / "b")
    bigger = vitkit.load_weights(tmp_path / "b", img_size=(64, 48))  # 2x3 -> 4x3: needs the stored config
    expected = resample_position_embedding(model.pos_embed.weight.detach(), 1, (2, 3), (4, 3))
    assert torch.equal(bigger.pos_embed.weight.detach(), expected)
    assert bigger(torch.zeros(1, 3, 64, 48)).shape == (1, 4)


def test_learned_2d_and_relative_tables_resample(tmp_path: Path) -> None:
    for variant, size in (("learned_2d", 64), ("relative", 48)):
        build(variant).save_pretrained(tmp_path / variant)
        model = vitkit.load_weights(tmp_path / variant, img_size=size)
        assert model(torch.zeros(1, 3, size, size)).shape[-1] == model.config.num_classes


def test_raw_vitkit_state_dict(tmp_path: Path) -> None:
    model = build("hybrid")
    torch.save(model.state_dict(), tmp_path / "sd.pth")
    loaded = vitkit.load_weights(tmp_path / "sd.pth", num_heads=3)
    assert loaded.config.resnet_layers == (1,) and loaded.config.num_heads == 3
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), atol=0, rtol=0)


def test_config_json_is_plain_json(tmp_path: Path) -> None:
    build("hybrid").save_pretrained(tmp_path / "m")
    data = json.loads((tmp_path / "m" / "config.json").read_text())
    assert data["resnet_layers"] == [1] and data["img_size"] == [32, 32]


def test_non_square_state_dict_needs_its_training_size(tmp_path: Path) -> None:
    # a registry width: a bare state dict does not say its number of heads
    model = randomize(vitkit.create_model("ViT-Ti/16", depth=1, img_size=(32, 48), num_classes=2))
    torch.save(model.state_dict(), tmp_path / "wide.pth")
    with pytest.raises(ValueError, match="do not form a square grid; pass the source img_size"):
        vitkit.load_weights(tmp_path / "wide.pth")
    same = vitkit.load_weights(tmp_path / "wide.pth", source_img_size=(32, 48))
    assert torch.equal(same.pos_embed.weight, model.pos_embed.weight)
    taller = vitkit.load_weights(tmp_path / "wide.pth", source_img_size=(32, 48), img_size=(64, 48))
    expected = resample_position_embedding(model.pos_embed.weight.detach(), 1, (2, 3), (4, 3))
    assert torch.equal(taller.pos_embed.weight.detach(), expected)


@pytest.mark.slow
def test_import_stays_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, vitkit; vitkit.load_weights; print('timm' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
