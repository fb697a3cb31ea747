"""The published checkpoints speak ImageNet's class names (vitkit.weights.imagenet): by name, and as a file that has
a published file's name and head; names in the order timm's ImageNet info files give them."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from vitkit import cli, create_model, export_npz, load_weights
from vitkit.cache import CACHE_ENV
from vitkit.weights import hub
from vitkit.weights.imagenet import imagenet_class_names

TABBY = 281


def test_the_names_are_imagenets_in_the_heads_order():
    for dataset, count in ((hub.I1K, hub.I1K_CLASSES), (hub.I21K, hub.I21K_CLASSES)):
        names = imagenet_class_names(dataset)
        assert len(names) == len(set(names)) == count
    assert imagenet_class_names(hub.I1K)[TABBY] == "tabby, tabby cat"
    assert "crane (n02012849)" in imagenet_class_names(hub.I1K)  # a lemma two classes share: made distinct
    with pytest.raises(ValueError, match="vitkit ships ImageNet-1k, ImageNet-21k"):
        imagenet_class_names("ImageNet-22k")


def test_the_names_agree_with_timms_imagenet_info():
    timm_data = pytest.importorskip("timm.data")
    for dataset, subset in ((hub.I1K, "imagenet-1k"), (hub.I21K, "imagenet-21k-goog")):
        info = timm_data.ImageNetInfo(subset)
        ours = imagenet_class_names(dataset)
        theirs = [info.index_to_description(i) for i in range(info.num_classes())]
        assert [name.split(" (n")[0] for name in ours] == theirs


def tabby_model(num_classes: int = hub.I1K_CLASSES) -> torch.nn.Module:
    """A tiny ViT whose head says class 281 whatever the image."""
    model = create_model("ViT-Mini/4", img_size=28, num_classes=num_classes, activation="gelu_tanh").eval()
    with torch.no_grad():
        model.head.bias[min(TABBY, num_classes - 1)] = 50.0
    return model


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "photo.jpg"
    Image.new("RGB", (40, 30), (120, 90, 60)).save(path)
    return str(path)


def test_predict_with_a_named_imagenet_1k_checkpoint_prints_the_class_name(
    tmp_path, monkeypatch, capsys, photo
):
    """A published name, its file already in the cache (no download): predict prints "tabby, tabby cat"."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    entry = hub.Pretrained(
        name="ViT-Mini/4-i21k-in1k-28",
        model="ViT-Mini/4",
        file="imagenet21k+imagenet2012/ViT-Mini_4.npz",
        release="original",
        pretraining=hub.I21K,
        fine_tuning=hub.I1K,
        img_size=28,
        num_classes=hub.I1K_CLASSES,
    )
    monkeypatch.setitem(hub.PRETRAINED, entry.name, entry)
    monkeypatch.setitem(hub._LOOKUP, entry.name.lower(), entry)
    entry.cache_path.parent.mkdir(parents=True)
    export_npz(tabby_model(), entry.cache_path)
    assert cli.main(["predict", photo, "--weights", entry.name, "--device", "cpu", "--topk", "1"]) == 0
    assert f"tabby, tabby cat ({TABBY})" in capsys.readouterr().out
    assert load_weights(entry.name, num_classes=3).class_names is None  # a new head: no names yet


def test_a_file_with_a_published_name_and_head_gets_its_names(tmp_path):
    export_npz(
        tabby_model(), tmp_path / "ViT-B_16.npz"
    )  # the docs' example: imagenet21k+imagenet2012/ViT-B_16
    assert load_weights(tmp_path / "ViT-B_16.npz").class_names[TABBY] == "tabby, tabby cat"
    export_npz(tabby_model(hub.I21K_CLASSES), tmp_path / "i21k" / "ViT-B_16.npz")  # imagenet21k/ViT-B_16
    assert load_weights(tmp_path / "i21k" / "ViT-B_16.npz").class_names == imagenet_class_names(hub.I21K)
    export_npz(tabby_model(10), tmp_path / "ten" / "ViT-B_16.npz")  # a published name, but not its head
    assert load_weights(tmp_path / "ten" / "ViT-B_16.npz").class_names is None
    export_npz(tabby_model(), tmp_path / "mine.npz")  # 1000 classes of someone's own
    assert load_weights(tmp_path / "mine.npz").class_names is None
