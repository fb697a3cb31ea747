"""train.fit='last_blocks' (configs/photos_last_blocks.toml): the last blocks and a head tuned on cached tokens of
the frozen blocks, saved as the whole ViT whose forward is the training forward."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest
import torch

import vitkit
from families import build_tiny_family
from image_collections import write_folder
from vitkit import cli
from vitkit.data import FolderSource
from vitkit.data.transforms import eval_transform
from vitkit.precision import Precision, inference_precision
from vitkit.recipe.run_config import RunConfig
from vitkit.training.features import FeatureStore, image_keys, store_path
from vitkit.training.frozen_fit import FrozenFit
from vitkit.training.last_blocks import train_tuned, tuned_logits

SMALL = dict(img_size=32, patch_size=8, hidden_size=32, depth=3, num_heads=2, mlp_dim=32, num_classes=7)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return write_folder(tmp_path_factory.mktemp("last_blocks") / "photos")


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "vit"
    vitkit.create_model("ViT-Ti/16", **SMALL).save_pretrained(path)
    return path


def last_blocks_command(weights: Path, photos: Path) -> list[str]:
    return [
        "finetune",
        "--weights",
        str(weights),
        "--config",
        "photos_last_blocks",
        f"data.source=folder:{photos}",
    ]


def fit(weights: Path, photos: Path, out: Path, *extra: str) -> dict:
    argv = last_blocks_command(weights, photos)
    argv += ["model.img_size=32", "train.precision=fp32", "train.tuned_blocks=1", "--steps", "6"]
    assert cli.main([*argv, "--batch-size", "16", "optim.lr=0.03", "--out", str(out), *extra]) == 0
    return json.loads((out / "report.json").read_text())


def tuned(
    precision: str, model: vitkit.VisionTransformer | None = None
) -> tuple[list[float], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(losses, weights before, weights after) of 3 steps tuning the last of 3 blocks of `model` (a small ViT by
    default) in `precision`, on cached tokens of random images (the model's own forward from them checked first)."""
    torch.manual_seed(0)
    if model is None:
        model = vitkit.create_model("ViT-Ti/16", **{**SMALL, "num_classes": 3}).eval()
    images, labels = torch.randn(8, 3, 32, 32), torch.arange(8) % 3
    with torch.no_grad():
        tokens = model.tokens_entering(images, 2)
        torch.testing.assert_close(tuned_logits(model, tokens, 2), model(images), rtol=0, atol=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = RunConfig()
    config.train.steps, config.train.batch_size, config.optim.warmup_steps = 3, 4, 0
    cpu = torch.device("cpu")
    fit = SimpleNamespace(
        config=config, model=model, device=cpu, precision=Precision(precision, "", cpu), say=print
    )
    fit.features = {"train": (tokens.numpy(), labels.numpy())}
    losses, _ = train_tuned(cast(FrozenFit, fit), 2)
    return losses, before, model.state_dict()


def test_tuning_moves_only_the_last_blocks_and_the_forward_continues_from_their_tokens():
    losses, before, after = tuned("fp32")
    assert len(losses) == 3 and all(np.isfinite(losses))
    moved = {k for k in after if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith(("blocks.2.", "norm.", "head.")) for k in moved), moved
    assert "blocks.2.attn.qkv.weight" in moved and "head.weight" in moved


@pytest.mark.parametrize(
    "kind, overrides, pooling",
    [
        ("dinov2_reg", {}, ()),  # registers, LayerScale: the class token alone in the last block
        ("dinov2_reg", {"classifier": "token_gap"}, ()),
        ("siglip", {}, ("attn_pool.",)),  # the attention pool reads the tuned blocks' tokens
        ("deit3", {"classifier": "gap", "fc_norm": True}, ("fc_norm.",)),  # the final norm after pooling
    ],
)
def test_tuning_a_family_moves_its_last_block_pooling_and_head(kind, overrides, pooling):
    model = build_tiny_family(kind, depth=3, num_classes=3, **overrides)
    losses, before, after = tuned("fp32", model)
    assert len(losses) == 3 and all(np.isfinite(losses))
    moved = {k for k in after if not torch.equal(before[k], after[k])}
    assert all(k.startswith(("blocks.2.", "norm.", "head.", *pooling)) for k in moved), moved
    assert {"blocks.2.attn.qkv.weight", "head.weight"} <= moved
    assert all(any(k.startswith(p) for k in moved) for p in pooling), moved
    if model.config.layer_scale is not None:
        assert "blocks.2.ls2.gamma" in moved


def test_the_tuned_steps_run_in_the_fits_precision():
    """bf16 autocast where the fit computes in bf16, with float32 weights: losses near float32's, not equal."""
    fp32, bf16 = tuned("fp32")[0], tuned("bf16")
    assert bf16[0] != fp32 and bf16[0] == pytest.approx(fp32, abs=0.05)
    assert all(weight.dtype == torch.float32 for weight in bf16[2].values())


@pytest.mark.slow
def test_the_saved_vit_is_the_training_forward_with_its_frozen_blocks_unchanged(
    weights, photos, tmp_path, monkeypatch
):
    monkeypatch.setenv("VITKIT_CACHE", str(tmp_path / "cache"))
    report = fit(weights, photos, tmp_path / "run")
    assert report["fit"] == "last_blocks" and report["features_computed"] == 80 and report["steps"] == 6
    pretrained, tuned = vitkit.load_weights(weights), vitkit.load_weights(tmp_path / "run")
    before, after = pretrained.state_dict(), tuned.state_dict()
    frozen = [k for k in after if not k.startswith(("blocks.2.", "norm.", "head."))]
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)  # bitwise
    assert not torch.equal(before["blocks.2.mlp.fc1.weight"], after["blocks.2.mlp.fc1.weight"])
    assert tuned.head.weight.abs().sum() > 0 and tuned.class_names == sorted(
        p.name for p in (photos / "train").iterdir()
    )

    test = FolderSource(photos, "test")  # the cached sequences of the test photos, as the fit read them
    start = vitkit.load_weights(weights, num_classes=10, reset_head=True)
    store = FeatureStore(store_path(start, inference_precision("fp32", start, 8), tokens_entering=2))
    tokens = store.get(image_keys(test))
    images = eval_transform(torch.stack([test.read(i) for i in range(len(test))]), (32, 32), 3)
    with torch.no_grad():
        torch.testing.assert_close(tuned.tokens_entering(images, 2), tokens, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(tuned(images), tuned_logits(tuned, tokens, 2), rtol=1e-5, atol=1e-5)
        accuracy = (tuned(images).argmax(1) == test.labels).float().mean().item()
    assert accuracy == pytest.approx(report["test_top1"])

    again = fit(weights, photos, tmp_path / "again", "optim.lr=0.01")  # another lr: every sequence cached
    assert again["features_computed"] == 0
    precision = inference_precision("fp32", start, 8)
    assert store_path(start, precision, tokens_entering=1) != store_path(start, precision, tokens_entering=2)


@pytest.mark.slow
def test_more_tuned_blocks_than_the_model_has_is_one_line(weights, photos, tmp_path, capsys):
    argv = last_blocks_command(weights, photos)
    assert cli.main([*argv, "model.img_size=32", "train.tuned_blocks=4", "--out", str(tmp_path / "run")]) == 2
    assert "train.tuned_blocks is 4 but the model has 3 blocks" in capsys.readouterr().err


def test_a_quiet_fit_prints_nothing(weights, photos, tmp_path, capfd, measuring_precision):
    report = fit(weights, photos, tmp_path / "run", "--quiet", "train.precision=auto")
    assert capfd.readouterr() == ("", "") and report["fit"] == "last_blocks"
