"""The fast path's feature cache checks what it reads and keys a photo by its content: a flipped bit in a store
file is never used (one line, the features computed again, the same as before); a photo rewritten in place with
its size and modification time kept is new; two processes saving the same store at once lose nothing."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
import torch

from image_collections import write_folder
from tiny import build_tiny_vit
from vitkit.data import FolderSource
from vitkit.precision import inference_precision
from vitkit.training.features import FeatureStore, content_key, image_keys, split_features


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    return write_folder(tmp_path_factory.mktemp("store") / "photos", {"train": 12})


@pytest.fixture(scope="module")
def model():
    return build_tiny_vit(img_size=32, patch_size=8, num_classes=7)


def features_of(model, source: FolderSource, store: FeatureStore, capsys) -> tuple[torch.Tensor, str]:
    """(the features split_features gives, the line it prints) on the tiny ViT at 32 px in fp32."""
    features, _, _ = split_features(
        model, source, store, inference_precision("fp32", model, 8), 8, "train features"
    )
    return torch.from_numpy(features), capsys.readouterr().out


def flip_a_bit(path: Path, from_end: int) -> None:
    data = bytearray(path.read_bytes())
    data[-from_end] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_flipped_bit_in_a_store_file_is_never_used(model, photos, tmp_path, capsys):
    source = FolderSource(photos, "train")
    path = tmp_path / "store.safetensors"
    store = FeatureStore(path)
    first, said = features_of(model, source, store, capsys)
    assert "0 features cached, 12 to compute" in said
    store.save()
    again, said = features_of(model, source, FeatureStore(path), capsys)
    assert "12 features cached, 0 to compute" in said and torch.equal(again, first)
    flip_a_bit(path, 5)  # in the last feature's bytes
    store = FeatureStore(path)
    assert capsys.readouterr().err == (
        f"features cache {path}: not used, it does not match its checksum (a damaged or altered file); "
        "its features are computed again\n"
    )
    recomputed, said = features_of(model, source, store, capsys)
    assert "0 features cached, 12 to compute" in said and torch.equal(recomputed, first)
    store.save()
    assert not capsys.readouterr().err and len(FeatureStore(path).rows) == 12  # written again, whole
    path.write_bytes(path.read_bytes()[:100])  # cut short: not even a safetensors header
    assert not FeatureStore(path).rows
    assert capsys.readouterr().err.count("\n") == 1


def test_a_photo_is_keyed_by_its_content(photos, tmp_path):
    source = FolderSource(photos, "train")
    keys = image_keys(source)
    assert len(set(keys)) == len(keys) and all(key.startswith("sha256:") for key in keys)
    photo = Path(os.fsdecode(source.path(0)))
    copy = tmp_path / "elsewhere.png"
    copy.write_bytes(photo.read_bytes())
    assert content_key(copy) == keys[0]  # copied or moved: the same features
    other = Path(os.fsdecode(source.path(1))).read_bytes()
    stat = copy.stat()
    rewritten = other[: stat.st_size].ljust(stat.st_size, b"\0")  # other bytes, the same size ...
    copy.write_bytes(rewritten)
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... and the same modification time
    assert copy.stat().st_size == stat.st_size and copy.stat().st_mtime_ns == stat.st_mtime_ns
    assert content_key(copy) != keys[0]
    assert "|unreadable|" in content_key(tmp_path / "gone.png")


def test_the_same_photo_twice_is_one_row(tmp_path):
    path = tmp_path / "store.safetensors"
    store = FeatureStore(path)
    store.add(["a", "b"], torch.tensor([[1.0], [2.0]]))
    store.add(["a", "c"], torch.tensor([[1.0], [3.0]]))
    assert store.get(["a", "b", "c"]).flatten().tolist() == [1.0, 2.0, 3.0]
    store.save()
    again = FeatureStore(path)
    assert again.get(["c", "b", "a"]).flatten().tolist() == [3.0, 2.0, 1.0] and len(again.features) == 3


def save_at_once(path: Path, keys: list[str], value: float, barrier) -> None:
    """A fit's store: read (before the other wrote), grown by `keys`, saved when both are ready to save."""
    store = FeatureStore(path)
    store.add(keys, torch.full((len(keys), 4), value))
    barrier.wait(timeout=30)
    store.save()


def test_two_processes_saving_one_store_at_once_lose_nothing(tmp_path):
    path = tmp_path / "store.safetensors"
    first = FeatureStore(path)
    first.add(["shared"], torch.zeros(1, 4))
    first.save()
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    workers = [
        context.Process(target=save_at_once, args=(path, [f"{name}{i}" for i in range(50)], value, barrier))
        for name, value in (("left", 1.0), ("right", 2.0))
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    merged = FeatureStore(path)
    assert len(merged.rows) == 101 and merged.get(["shared"]).sum() == 0
    assert merged.get([f"left{i}" for i in range(50)]).eq(1).all()
    assert merged.get([f"right{i}" for i in range(50)]).eq(2).all()
