"""The lazy ImageFolder: its index, decoding rules, and each kind of bad folder as a one-line error or a counted skip."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from image_collections import write_folder
from vitkit.data import (
    FolderSource,
    ImageDecodeError,
    ReadOptions,
    TrainBatches,
    TrainTransform,
    eval_batches,
    gather_images,
    open_source,
)


def make_folder(root: Path) -> dict[str, Path]:
    """train/{cat,dog} in several PIL modes at 12x10, a corrupt and a truncated file, plus val/ of mixed sizes."""
    paths = {}
    rgb = np.zeros((10, 12, 3), dtype=np.uint8)
    rgb[..., 0] = 200
    images = {
        "cat/rgb.png": Image.fromarray(rgb),
        "cat/grey.png": Image.fromarray(np.full((10, 12), 100, np.uint8), "L"),
        "cat/sixteen.png": Image.fromarray(np.full((10, 12), 257 * 100, np.uint16)),
        "dog/rgba.png": Image.fromarray(np.zeros((10, 12, 4), np.uint8), "RGBA"),  # fully transparent
        "dog/palette.png": Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE),
        "dog/photo.jpg": Image.fromarray(rgb),
        "dog/still.gif": Image.fromarray(rgb),
    }
    for name, image in images.items():
        path = root / "train" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path)
        paths[name] = path
    (root / "train" / "dog" / "notes.txt").write_text("not an image")  # ignored: not an image extension
    paths["corrupt"] = root / "train" / "dog" / "corrupt.png"
    paths["corrupt"].write_bytes(b"this is not a png")
    paths["truncated"] = root / "train" / "cat" / "truncated.png"
    noise = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(noise, "png")
    paths["truncated"].write_bytes(noise.getvalue()[:200])  # header intact, pixel data cut
    (root / "val" / "dog").mkdir(parents=True)
    Image.fromarray(rgb).resize((30, 20)).save(root / "val" / "dog" / "big.png")
    Image.fromarray(rgb).save(root / "val" / "dog" / "small.png")
    return paths


def test_index_order_labels_and_decoding_rules(tmp_path):
    make_folder(tmp_path)
    source = open_source(str(tmp_path), "train")  # a bare directory is a folder source
    assert isinstance(source, FolderSource) and source.classes == ["cat", "dog"] and len(source) == 9
    names = [Path(source.name(i)).name for i in range(len(source))]
    assert names == ["grey.png", "rgb.png", "sixteen.png", "truncated.png", "corrupt.png", "palette.png",
                     "photo.jpg", "rgba.png", "still.gif"]  # fmt: skip
    assert source.labels.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    unreadable = ("truncated.png", "corrupt.png")
    pixel = {name: source.read(i)[:, 0, 0].tolist() for i, name in enumerate(names) if name not in unreadable}
    assert pixel["grey.png"] == [100, 100, 100] and source.read(0, channels=1).tolist() == [[[100] * 12] * 10]
    assert pixel["sixteen.png"] == [100, 100, 100]  # 16-bit 25700 -> 8-bit 100
    assert pixel["rgba.png"] == [255, 255, 255]  # transparent over white
    assert pixel["palette.png"] == pixel["rgb.png"] == pixel["still.gif"] == [200, 0, 0]
    for bad in unreadable:
        with pytest.raises(ImageDecodeError, match=bad):
            source.read(names.index(bad))


def test_val_split_of_mixed_sizes_is_resized_and_centre_cropped(tmp_path):
    make_folder(tmp_path)
    source = FolderSource(tmp_path, "test")
    assert (
        "val" in source.description and source.labels.tolist() == [1, 1] and source.classes == ["cat", "dog"]
    )
    (batch,) = eval_batches(source, [torch.arange(2)], (16, 16), 3, torch.device("cpu"))
    assert batch.images.shape == (2, 3, 16, 16)
    assert torch.allclose(batch.images[:, 0], torch.tensor(200 / 127.5 - 1))
    (tmp_path / "val").rename(tmp_path / "validation")  # every source's names for the evaluation split
    assert "validation" in FolderSource(tmp_path, "test").description


def test_few_shot_images_of_mixed_sizes_are_brought_to_one_square(tmp_path):
    make_folder(tmp_path)
    images = gather_images(FolderSource(tmp_path, "test"), [0, 1])  # 30x20 and 12x10 files
    assert images.shape == (2, 3, 256, 256) and images.dtype == torch.uint8
    assert images[:, 0].float().mean() == pytest.approx(200, abs=1)


def test_unreadable_images_stop_the_run_or_are_skipped_and_listed(tmp_path):
    paths = make_folder(tmp_path)
    transform = TrainTransform(8, crop="none", flip=False)
    stop = TrainBatches(FolderSource(tmp_path, "train"), transform, 8, 0, 1, torch.device("cpu"))
    with pytest.raises(ValueError, match="(corrupt|truncated).png: .*; set data.on_corrupt='skip'"):
        stop(0)
    source = FolderSource(tmp_path, "train", ReadOptions(workers=1, on_corrupt="skip"))
    batch = TrainBatches(source, transform, 8, 0, 1, torch.device("cpu"))(0)
    assert len(batch.indices) == 6 and batch.images.shape == (6, 3, 8, 8)
    assert sorted(line.split(":")[0] for line in batch.skipped) == sorted([str(paths["corrupt"]),
                                                                           str(paths["truncated"])])  # fmt: skip


def test_bad_folders_are_one_line_errors(tmp_path):
    root = write_folder(tmp_path / "ok", {"train": 20, "test": 10})
    (root / "test" / "zebra").mkdir()
    with pytest.raises(ValueError, match=r"test: class folder\(s\) zebra not in .*train"):
        FolderSource(root, "test")
    (root / "train" / "zebra").mkdir()
    with pytest.raises(ValueError, match="zebra: empty class folder"):
        FolderSource(root, "train")
    with pytest.raises(FileNotFoundError, match="needs the directories"):
        FolderSource(tmp_path / "missing", "train")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        open_source(f"folder:{tmp_path / 'missing'}", "train")
    with pytest.raises(ValueError, match="unknown data.source 'imagenet'"):
        open_source("imagenet", "train")


def test_a_test_class_missing_from_train_keeps_the_train_labels(tmp_path):
    root = write_folder(tmp_path, {"train": 20, "test": 10})
    for image in (root / "test" / "disc").iterdir():
        image.unlink()
    (root / "test" / "disc").rmdir()
    train, test = FolderSource(root, "train"), FolderSource(root, "test")
    assert test.classes == train.classes and train.classes.index("disc") not in test.labels.tolist()
    names = [Path(test.name(i)).parent.name for i in range(len(test))]
    assert [train.classes[label] for label in test.labels.tolist()] == names
