"""Dataset sources: IDX and CIFAR readers, where data is searched, ImageFolder decoding, builtins."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets.mnist import read_image_file, read_label_file

from vitkit.cache import CACHE_ENV
from vitkit.data import builtin, load_dataset
from vitkit.data.builtin import EMBEDDED_DIR, read_cifar_bin, read_idx, write_idx

FULL_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No user data dirs, no system copy, an empty cache, no network: each test sets what it needs."""
    monkeypatch.delenv("VITKIT_DATA", raising=False)
    monkeypatch.delenv("VITKIT_EMBEDDED", raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(builtin, "SYSTEM_FASHION_DIR", tmp_path / "no-system-copy")
    monkeypatch.setattr(builtin, "_online", lambda url: False)


def gunzip(src: Path, dst: Path) -> Path:
    """A raw copy of a .gz file, for readers that only take raw IDX."""
    with gzip.open(src, "rb") as f:
        dst.write_bytes(f.read())
    return dst


def write_fashion(directory: Path, split: str = "train", n: int = 20, gz: bool = True) -> np.ndarray:
    """A tiny Fashion-MNIST-format split in `directory`; returns its images."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    image_stem, label_stem = builtin.FASHION_FILES[split]
    suffix = ".gz" if gz else ""
    write_idx(directory / f"{image_stem}{suffix}", images)
    write_idx(directory / f"{label_stem}{suffix}", np.arange(n, dtype=np.uint8) % 10)
    return images


# ------------------------------------------------------------------------------------------ IDX


@pytest.mark.parametrize("split", ["train", "t10k"])
def test_read_idx_matches_torchvision_reader(tmp_path, split):
    images_gz = EMBEDDED_DIR / f"{split}-images-idx3-ubyte.gz"
    labels_gz = EMBEDDED_DIR / f"{split}-labels-idx1-ubyte.gz"
    expected_images = read_image_file(str(gunzip(images_gz, tmp_path / "images")))
    expected_labels = read_label_file(str(gunzip(labels_gz, tmp_path / "labels")))
    assert torch.equal(torch.from_numpy(read_idx(images_gz)), expected_images)
    assert torch.equal(torch.from_numpy(read_idx(labels_gz)).long(), expected_labels)
    assert torch.equal(torch.from_numpy(read_idx(tmp_path / "images")), expected_images)  # raw file


def test_embedded_subset_is_first_n_per_class_of_the_official_files():
    train = load_dataset("fashion_mnist", "train", subset="embedded")
    test = load_dataset("fashion_mnist", "test", subset="embedded")
    assert train.images.shape == (4000, 1, 28, 28) and len(test) == 1000
    assert torch.bincount(train.labels).tolist() == [400] * 10
    assert torch.bincount(test.labels).tolist() == [100] * 10
    assert "embedded subset (4000 images)" in train.description
    if not (FULL_DIR / "train-labels-idx1-ubyte.gz").exists():
        pytest.skip("full Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
    labels = read_idx(FULL_DIR / "t10k-labels-idx1-ubyte.gz")
    keep = np.sort(np.concatenate([np.flatnonzero(labels == c)[:100] for c in range(10)]))
    assert torch.equal(
        test.images[:, 0], torch.from_numpy(read_idx(FULL_DIR / "t10k-images-idx3-ubyte.gz")[keep])
    )


@pytest.mark.parametrize(
    "name, content",
    [
        ("bad-magic", bytes([0, 0, 9, 1]) + (3).to_bytes(4, "big") + b"abc"),
        (
            "truncated",
            bytes([0, 0, 8, 3]) + b"".join(n.to_bytes(4, "big") for n in (2, 28, 28)) + b"\0" * 100,
        ),
        ("too-short", b"\0\0"),
    ],
)
def test_corrupt_idx_raises_naming_the_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=name):
        read_idx(path)


def test_truncated_gzip_raises_naming_the_file(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes((EMBEDDED_DIR / "t10k-images-idx3-ubyte.gz").read_bytes()[:5000])
    with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz"):
        read_idx(path)


def test_write_idx_roundtrip_raw_and_gz(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    for name in ("a", "a.gz"):
        write_idx(tmp_path / name, array)
        assert np.array_equal(read_idx(tmp_path / name), array)


# ------------------------------------------------------------------------------- Fashion-MNIST search


def test_data_dir_comes_before_env_and_is_reported(tmp_path, monkeypatch):
    mine = write_fashion(tmp_path / "mine", n=20)
    write_fashion(tmp_path / "env", n=30)
    monkeypatch.setenv("VITKIT_DATA", str(tmp_path / "env"))
    ds = load_dataset("fashion_mnist", "train", str(tmp_path / "mine"))
    assert len(ds) == 20
    assert torch.equal(ds.images[:, 0], torch.from_numpy(mine))
    assert ds.labels.dtype == torch.int64 and ds.classes[0] == "T-shirt/top"
    assert ds.description == f"Fashion-MNIST train, full set (20 images) from {tmp_path / 'mine'}"
    assert len(load_dataset("fashion_mnist", "train")) == 30  # falls to $VITKIT_DATA


def test_raw_files_and_torchvision_layout_are_found(tmp_path):
    write_fashion(tmp_path / "FashionMNIST" / "raw", split="test", n=10, gz=False)
    assert "full set (10 images)" in load_dataset("fashion_mnist", "test", str(tmp_path)).description


def test_embedded_is_forced_by_env(tmp_path, monkeypatch):
    write_fashion(tmp_path, n=20)
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")
    ds = load_dataset("fashion_mnist", "train", str(tmp_path))
    assert len(ds) == 4000 and "embedded subset" in ds.description and "VITKIT_EMBEDDED" in ds.description


def test_offline_without_data_falls_back_to_embedded_and_says_so():
    with pytest.warns(UserWarning, match="embedded subset"):
        ds = load_dataset("fashion_mnist", "test")
    assert len(ds) == 1000 and "embedded subset" in ds.description and "offline" in ds.description


def test_full_required_offline_lists_places_and_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("fashion_mnist", "train", str(tmp_path / "here"), subset="full")
    message = str(info.value)
    for place in (
        tmp_path / "here",
        builtin.SYSTEM_FASHION_DIR,
        tmp_path / "cache" / "fashion-mnist",  # vitkit's cache directory, as for weights and indexes
    ):
        assert str(place) in message
    assert "apt-get install dataset-fashion-mnist" in message and "--data-dir" in message


def test_online_download_goes_to_data_dir_with_md5(tmp_path, monkeypatch):
    calls = []

    def fake_download(url, root, filename, md5):
        calls.append((url, filename, md5))
        Path(root).mkdir(parents=True, exist_ok=True)
        shutil.copy(EMBEDDED_DIR / filename.replace("train", "t10k"), Path(root) / filename)

    monkeypatch.setattr(builtin, "_online", lambda url: True)
    monkeypatch.setattr("torchvision.datasets.utils.download_url", fake_download)  # imported when used
    ds = load_dataset("fashion_mnist", "train", str(tmp_path / "dl"))
    assert ds.description == f"Fashion-MNIST train, full set (1000 images) downloaded to {tmp_path / 'dl'}"
    assert [c[2] for c in calls] == ["8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe"]

    def corrupted(url, root, filename, md5):
        raise RuntimeError("File not found or corrupted.")

    monkeypatch.setattr("torchvision.datasets.utils.download_url", corrupted)
    with pytest.raises(ValueError, match="t10k-images-idx3-ubyte.gz.*MD5"):
        load_dataset("fashion_mnist", "test", str(tmp_path / "dl2"))


# ---------------------------------------------------------------------------------------------- CIFAR


def cifar_records(labels: list[tuple[int, ...]], seed: int = 0) -> tuple[bytes, np.ndarray]:
    """Binary CIFAR records with the given label bytes, and the images they hold."""
    images = np.random.default_rng(seed).integers(0, 256, (len(labels), 3, 32, 32), dtype=np.uint8)
    blob = b"".join(bytes(lab) + img.tobytes() for lab, img in zip(labels, images, strict=True))
    return blob, images


def test_cifar10_bin_reader_and_train_batches(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    expected = []
    for i in range(1, 6):
        blob, images = cifar_records([(i,), (9,)], seed=i)
        (folder / f"data_batch_{i}.bin").write_bytes(blob)
        expected.append(images)
    ds = load_dataset("cifar10", "train", str(tmp_path))
    assert ds.images.shape == (10, 3, 32, 32)
    assert torch.equal(ds.images, torch.from_numpy(np.concatenate(expected)))
    assert ds.labels.tolist() == [1, 9, 2, 9, 3, 9, 4, 9, 5, 9]
    assert ds.classes[9] == "truck" and "CIFAR-10 train (10 images)" in ds.description


def test_cifar100_uses_fine_labels(tmp_path):
    blob, images = cifar_records([(3, 77), (19, 5)])
    (tmp_path / "test.bin").write_bytes(blob)
    ds = load_dataset("cifar100", "test", str(tmp_path))
    assert ds.labels.tolist() == [77, 5] and torch.equal(ds.images, torch.from_numpy(images))
    assert len(ds.classes) == 100 and ds.classes[77] == "snail"


def test_cifar_bad_size_names_the_file(tmp_path):
    (tmp_path / "test_batch.bin").write_bytes(b"\0" * 3000)
    with pytest.raises(ValueError, match="test_batch.bin"):
        read_cifar_bin(tmp_path / "test_batch.bin")


def test_missing_cifar_lists_every_place(tmp_path, monkeypatch):
    monkeypatch.setenv("VITKIT_DATA", str(tmp_path / "env"))
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("cifar10", "test", str(tmp_path / "arg"))
    message = str(info.value)
    for place in (
        "arg/cifar-10-batches-bin",
        "env/cifar-10-batches-bin",
        "cache/cifar-10-batches-bin",
    ):
        assert str(tmp_path / place) in message
    assert "cifar-10-binary.tar.gz" in message and "--data-dir" in message


# ----------------------------------------------------------------------------------------- builtins


def test_synthetic_is_deterministic_balanced_and_fast():
    a, b = load_dataset("synthetic", "train"), load_dataset("synthetic", "train")
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    assert a.images.shape == (600, 3, 32, 32) and torch.bincount(a.labels).tolist() == [60] * 10
    assert not torch.equal(a.images[:200], load_dataset("synthetic", "test").images)


def test_digits_split_is_class_balanced():
    pytest.importorskip("sklearn")
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    assert len(train) + len(test) == 1797 and train.images.shape[1:] == (1, 8, 8)
    assert int(test.images.max()) == 255 and torch.bincount(test.labels).min() >= 35


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'"):
        load_dataset("imagenet", "train")
    with pytest.raises(ValueError, match="split"):
        load_dataset("synthetic", "validation")
    with pytest.raises(ValueError, match="fashion_mnist only"):
        load_dataset("cifar10", "train", subset="embedded")
