"""Class names through transformers: model.class_names <-> config.id2label / label2id."""

from __future__ import annotations

from pathlib import Path

import pytest

import vitkit
from vitkit.weights.hf import class_names_from_config

NAMES = ["T-shirt/top", "Trouser", "Pullover"]


@pytest.mark.slow  # importing transformers takes seconds
def test_names_travel_to_transformers_and_back(tmp_path: Path, tiny_vit) -> None:
    transformers = pytest.importorskip("transformers")
    model = tiny_vit("ViT-B/16")
    model.class_names = NAMES
    hf_model = vitkit.to_hf(model)
    assert hf_model.config.id2label == dict(enumerate(NAMES))
    assert hf_model.config.label2id == {name: i for i, name in enumerate(NAMES)}
    hf_model.save_pretrained(tmp_path / "hf")
    reloaded = transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf")
    assert vitkit.from_hf(reloaded).class_names == NAMES
    assert vitkit.load_weights(tmp_path / "hf").class_names == NAMES  # the directory, read by vitkit itself
    assert vitkit.load_weights(tmp_path / "hf", num_classes=3, reset_head=True).class_names is None


@pytest.mark.slow
def test_placeholder_labels_are_no_names(tiny_vit) -> None:
    pytest.importorskip("transformers")
    hf_model = vitkit.to_hf(
        tiny_vit("ViT-B/16")
    )  # no class names: transformers fills in LABEL_0, LABEL_1, ...
    assert hf_model.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    assert vitkit.from_hf(hf_model).class_names is None
    # a new head of another size drops names that no longer fit
    named = tiny_vit("ViT-B/16")
    named.class_names = NAMES
    assert vitkit.from_hf(vitkit.to_hf(named), num_classes=5).class_names is None


def test_malformed_id2label_is_one_line() -> None:
    with pytest.raises(ValueError, match="id2label must name classes 0..1"):
        class_names_from_config({"id2label": {"0": "a", "2": "b"}}, "config.json")
    assert class_names_from_config({"id2label": {"1": "b", "0": "a"}}, "config.json") == ["a", "b"]
