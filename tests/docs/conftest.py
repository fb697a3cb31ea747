"""The files the documentation's examples name, made for real: a tiny official-layout checkpoint, photos.

Each example page runs in a fresh copy of this workspace as its working directory, so `ViT-B_16.npz`,
`photo.jpg`, `photos/` and `configs/` resolve as they would in a user's checkout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitkit
from docs.documents import ROOT

# A ViT-B/16 in layout and patch size (the official .npz tree, 16x16 patches, 1000-class head), a few thousand
# times smaller: the examples load, resample and convert it as they would the real file; 2 blocks, which
# photos_last_blocks.toml tunes.
TINY_VIT = dict(
    img_size=32, hidden_size=32, depth=2, num_heads=2, mlp_dim=64, num_classes=1000, activation="gelu_tanh"
)
PHOTO_CLASSES = ("cat", "dog")
PHOTOS_PER_CLASS = {"train": 4, "test": 2}


def write_photo(path: Path, seed: int) -> None:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(40, 48, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, quality=90)


def write_workspace(root: Path) -> Path:
    vitkit.export_npz(vitkit.create_model("ViT-B/16", **TINY_VIT), root / "ViT-B_16.npz")
    write_photo(root / "photo.jpg", 0)
    for split, count in PHOTOS_PER_CLASS.items():
        for label, name in enumerate(PHOTO_CLASSES):
            for index in range(count):
                write_photo(root / "photos" / split / name / f"{index}.jpg", 100 * label + index)
    (root / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def workspace_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_workspace(tmp_path_factory.mktemp("doc_workspace"))


@pytest.fixture
def doc_workspace(workspace_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of the workspace, made the working directory."""
    directory = tmp_path / "workspace"
    shutil.copytree(workspace_template, directory, symlinks=True)
    monkeypatch.chdir(directory)
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")  # the Fashion-MNIST subset shipped with vitkit: no download
    return directory
