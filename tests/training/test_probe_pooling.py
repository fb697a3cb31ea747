"""The fits on frozen features read each family's own features (`probe_classifier`: DINOv2's class token beside
the mean of the patch tokens), and the saved run computes exactly the features its head was fitted on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from image_collections import write_folder
from tiny import build_tiny_vit
from vitkit import cli
from vitkit.data import FolderSource
from vitkit.evaluation.fewshot import extract_features, precompute
from vitkit.models.registry import IMAGENET_MEAN, IMAGENET_STD
from vitkit.training.frozen_fit import probe_pooling

# A DINOv2 in miniature: LayerScale, 4 registers with position rows for the patches only, no head of its own.
DINOV2_LIKE = dict(
    img_size=32,
    patch_size=8,
    num_classes=0,
    layer_scale=1e-5,
    num_reg_tokens=4,
    prefix_pos_embed=False,
    probe_classifier="token_gap",
    image_mean=IMAGENET_MEAN,
    image_std=IMAGENET_STD,
)


def test_the_probe_pooling_is_the_class_token_beside_the_patch_mean():
    backbone = build_tiny_vit(**DINOV2_LIKE)
    backbone.reset_classifier(5)
    backbone.class_names = list("abcde")
    probed = probe_pooling(backbone, {})
    assert probed.config.classifier == "token_gap" and probed.class_names == list("abcde")
    assert probed.head.in_features == 2 * 32 and probed.head.out_features == 5
    assert not probed.head.weight.any()  # a new zero-initialised head
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = backbone.forward_features(x)  # encoded and normalised
        expected = torch.cat([tokens[:, 0], tokens[:, 1 + 4 :].mean(1)], dim=-1)
        torch.testing.assert_close(probed(x, pre_logits=True), expected, rtol=1e-6, atol=1e-6)
    assert probe_pooling(backbone, {"classifier": "token"}) is backbone  # the recipe's word wins
    assert probe_pooling(build_tiny_vit(), {}).config.classifier == "token"  # the paper's models: unchanged


@pytest.mark.slow
def test_a_linear_fit_on_dinov2_like_weights_saves_the_features_it_was_fitted_on(tmp_path: Path):
    weights = tmp_path / "dinov2"
    build_tiny_vit(**DINOV2_LIKE).save_pretrained(weights)
    photos = write_folder(tmp_path / "photos")
    run = tmp_path / "run"
    argv = [
        "finetune",
        "--weights",
        str(weights),
        "--config",
        "photos_linear",
        f"data.source=folder:{photos}",
    ]
    assert cli.main([*argv, "model.img_size=32", "train.precision=fp32", "--quiet", "--out", str(run)]) == 0
    report = json.loads((run / "report.json").read_text())
    model = vitkit.load_weights(run)
    assert model.config.classifier == "token_gap" and model.head.in_features == 64
    assert model.config.mean_std == (IMAGENET_MEAN, IMAGENET_STD)
    train = FolderSource(photos, "train")
    features = extract_features(model, torch.stack([train.read(i) for i in range(len(train))]))
    assert features.shape == (60, 64)
    a, b = precompute(features, train.labels.numpy(), 10).affine(report["l2"])
    logits = model.head(torch.from_numpy(features)).detach().numpy()
    np.testing.assert_allclose(logits, features @ a + b, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_the_middle_path_tunes_the_last_block_under_the_probe_pooling(tmp_path: Path):
    weights = tmp_path / "dinov2"
    build_tiny_vit(**DINOV2_LIKE).save_pretrained(weights)
    photos = write_folder(tmp_path / "photos")
    argv = [
        "finetune",
        "--weights",
        str(weights),
        "--config",
        "photos_last_blocks",
        f"data.source=folder:{photos}",
    ]
    settings = ["model.img_size=32", "train.precision=fp32", "train.tuned_blocks=1", "train.epochs=2"]
    assert cli.main([*argv, *settings, "--quiet", "--out", str(tmp_path / "run")]) == 0
    model = vitkit.load_weights(tmp_path / "run")
    assert model.config.classifier == "token_gap" and model.head.in_features == 64
    assert model.config.mean_std == (IMAGENET_MEAN, IMAGENET_STD)
