"""The built-in datasets, decoded once into uint8 tensors: Fashion-MNIST (full or embedded), CIFAR, synthetic,
digits.

Every loader returns an ImageDataset whose `description` says exactly which data is in use, so a run's
log can never silently mix up the full Fashion-MNIST with the subset shipped inside vitkit.
"""

from __future__ import annotations

import gzip
import os
import socket
import struct
import urllib.error
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import numpy as np
import torch

from vitkit.cache import cache_dir

from .in_memory import ImageDataset

if TYPE_CHECKING:
    from torchvision.datasets import FashionMNIST

SPLITS = ("train", "test")
SUBSETS = ("auto", "full", "embedded")
EMBEDDED_DIR = Path(__file__).parent / "embedded"
SYSTEM_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")

FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
CIFAR100_CLASSES = """
apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly
camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup
dinosaur dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower
leopard lion lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid
otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray
road rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel streetcar
sunflower sweet_pepper table tank telephone television tiger tractor train trout tulip turtle
wardrobe whale willow_tree wolf woman worm
""".split()


@dataclass(frozen=True)
class CifarLayout:
    """Where a CIFAR binary release keeps its files and how a record is laid out."""

    title: str
    folder: str
    files: dict[str, tuple[str, ...]]
    label_bytes: int  # CIFAR-100 records start with (coarse, fine); we use the last (fine) byte
    classes: tuple[str, ...]
    url: str


CIFAR = {
    "cifar10": CifarLayout(
        "CIFAR-10",
        "cifar-10-batches-bin",
        {"train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)), "test": ("test_batch.bin",)},
        1,
        tuple(CIFAR10_CLASSES),
        "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
    ),
    "cifar100": CifarLayout(
        "CIFAR-100",
        "cifar-100-binary",
        {"train": ("train.bin",), "test": ("test.bin",)},
        2,
        tuple(CIFAR100_CLASSES),
        "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
    ),
}
NAMES = ("fashion_mnist", *CIFAR, "synthetic", "digits")


def load_dataset(name: str, split: str, data_dir: str | None = None, *, subset: str = "auto") -> ImageDataset:
    """One split of a named dataset, whole in memory (image collections: vitkit.data.open_source).

    subset (Fashion-MNIST only): 'auto' uses the full set when found or downloadable and the
    embedded subset otherwise (VITKIT_EMBEDDED=1 forces the subset), 'full' or 'embedded' insist.
    Corrupt IDX/CIFAR files always raise: a dataset of known size has no image to skip.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if subset not in SUBSETS:
        raise ValueError(f"subset must be one of {SUBSETS}, got {subset!r}")
    if subset != "auto" and name != "fashion_mnist":
        raise ValueError(f"subset={subset!r} applies to fashion_mnist only, not {name!r}")
    if name == "fashion_mnist":
        return load_fashion_mnist(split, data_dir, subset=subset)
    if name in CIFAR:
        return load_cifar(name, split, data_dir)
    if name == "synthetic":
        return make_synthetic(split)
    if name == "digits":
        return load_digits(split)
    raise ValueError(f"unknown dataset {name!r}: expected one of {NAMES} (folders: vitkit.data.open_source)")


# ---------------------------------------------------------------------------------------------- IDX


def read_idx(path: str | Path) -> np.ndarray:
    """An unsigned-byte IDX file (raw or .gz) as a uint8 array, checked against its header."""
    path = Path(path)
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:  # bad or truncated gzip stream
        raise ValueError(f"{path}: cannot read IDX data ({err})") from err
    if len(data) < 4 or data[:3] != b"\x00\x00\x08":
        raise ValueError(f"{path}: bad IDX magic number 0x{data[:4].hex()}, expected 0x000008 + ndim (ubyte)")
    ndim = data[3]
    header = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", data[4:header]) if len(data) >= header else None
    expected = header + int(np.prod(dims)) if dims is not None else header
    if dims is None or len(data) != expected:
        raise ValueError(f"{path}: IDX file is {len(data)} bytes, expected {expected} (truncated or corrupt)")
    return np.frombuffer(data, np.uint8, offset=header).reshape(dims).copy()


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write a uint8 array as IDX (gzip, mtime 0, if the name ends in .gz: byte-reproducible)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    payload = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path = Path(path)
    if path.suffix == ".gz":
        with (
            open(path, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as f,
        ):
            f.write(payload)
    else:
        path.write_bytes(payload)


def _find_idx(directory: Path, stem: str) -> Path | None:
    """The IDX file `stem` or `stem.gz` in a directory, if present."""
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _read_fashion(directory: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Images [N, 1, 28, 28] and labels of one split from a directory holding the IDX files."""
    image_stem, label_stem = FASHION_FILES[split]
    image_path, label_path = _find_idx(directory, image_stem), _find_idx(directory, label_stem)
    if image_path is None or label_path is None:
        raise FileNotFoundError(f"{directory}: missing {image_stem}[.gz] or {label_stem}[.gz]")
    images, labels = read_idx(image_path), read_idx(label_path)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(
            f"{image_path} / {label_path}: expected images [N, H, W] and labels [N], "
            f"got {images.shape} and {labels.shape}"
        )
    if labels.max(initial=0) >= len(fashion_mnist().classes):
        raise ValueError(f"{label_path}: label {labels.max()} out of range for 10 classes")
    return torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels).long()


def _user_dirs(data_dir: str | Path | None) -> list[Path]:
    """The directories the user pointed at: the data_dir argument, then $VITKIT_DATA."""
    dirs = [Path(data_dir).expanduser()] if data_dir else []
    if os.environ.get("VITKIT_DATA"):
        dirs.append(Path(os.environ["VITKIT_DATA"]).expanduser())
    return dirs


def fashion_mnist_places(data_dir: str | Path | None) -> list[Path]:
    """Directories searched, in order; each user dir also as dir/fashion-mnist and torchvision's layout."""
    places = []
    for base in _user_dirs(data_dir):
        places += [base, base / "fashion-mnist", base / "FashionMNIST" / "raw"]
    return places + [SYSTEM_FASHION_DIR, cache_dir("fashion-mnist")]


def _online(url: str) -> bool:
    """Whether the download host answers within a few seconds (avoids hanging when offline)."""
    host = urlparse(url).hostname or ""
    try:
        socket.create_connection((host, 80), timeout=5).close()
    except OSError:
        return False
    return True


def fashion_mnist() -> type[FashionMNIST]:
    """torchvision's FashionMNIST (class names, mirrors, MD5s), imported when a Fashion-MNIST is read: importing
    torchvision costs seconds that a command reading no built-in dataset should not pay."""
    from torchvision.datasets import FashionMNIST

    return FashionMNIST


def _download_fashion(target: Path, split: str) -> None:
    """Fetch one split's IDX files with torchvision, checking the MD5s it publishes."""
    from torchvision.datasets.utils import download_url

    md5s = {Path(name).stem: md5 for name, md5 in fashion_mnist().resources}
    for stem in FASHION_FILES[split]:
        url = f"{fashion_mnist().mirrors[0]}{stem}.gz"
        try:
            download_url(url, target, f"{stem}.gz", md5=md5s[stem])
        except RuntimeError as err:  # torchvision's "File not found or corrupted." after the MD5 check
            raise ValueError(
                f"{target / (stem + '.gz')}: download failed its MD5 check (expected {md5s[stem]})"
            ) from err


def load_fashion_mnist(
    split: str, data_dir: str | Path | None = None, *, subset: str = "auto"
) -> ImageDataset:
    """Fashion-MNIST: the full set if found (or downloadable), else the subset shipped with vitkit."""
    classes = list(fashion_mnist().classes)
    if subset == "auto" and os.environ.get("VITKIT_EMBEDDED", "") not in ("", "0"):
        return _embedded_fashion(split, "forced by VITKIT_EMBEDDED=1")
    if subset == "embedded":
        return _embedded_fashion(split, "subset='embedded'")
    places = fashion_mnist_places(data_dir)
    for place in places:
        if all(_find_idx(place, stem) for stem in FASHION_FILES[split]):
            images, labels = _read_fashion(place, split)
            return ImageDataset(
                images,
                labels,
                classes,
                f"Fashion-MNIST {split}, full set ({len(labels)} images) from {place}",
            )
    target = Path(data_dir).expanduser() if data_dir else cache_dir("fashion-mnist")
    looked = ", ".join(str(p) for p in places)
    reason = "offline"
    if _online(fashion_mnist().mirrors[0]):
        try:
            _download_fashion(target, split)
        except (urllib.error.URLError, OSError) as err:
            reason = f"download to {target} failed: {err}"
        else:
            images, labels = _read_fashion(target, split)
            description = f"Fashion-MNIST {split}, full set ({len(labels)} images) downloaded to {target}"
            return ImageDataset(images, labels, classes, description)
    if subset == "full":
        raise FileNotFoundError(
            f"Fashion-MNIST {split} not found in: {looked} ({reason}). Get it with "
            f"`apt-get install dataset-fashion-mnist`, or put the IDX files in DIR and pass --data-dir DIR "
            f"(or set VITKIT_DATA=DIR)"
        )
    warnings.warn(
        f"full Fashion-MNIST not found (looked in {looked}; {reason}): using the embedded subset. "
        f"Get the full set with `apt-get install dataset-fashion-mnist` or pass --data-dir",
        stacklevel=3,
    )
    return _embedded_fashion(split, f"full set not found; {reason}")


def _embedded_fashion(split: str, why: str) -> ImageDataset:
    """The class-balanced Fashion-MNIST subset under vitkit/data/embedded (see its README)."""
    images, labels = _read_fashion(EMBEDDED_DIR, split)
    description = f"Fashion-MNIST {split}, embedded subset ({len(labels)} images) shipped with vitkit ({why})"
    return ImageDataset(images, labels, list(fashion_mnist().classes), description)


# -------------------------------------------------------------------------------------------- CIFAR


def read_cifar_bin(path: str | Path, label_bytes: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A CIFAR binary batch: records of label byte(s) + 3x32x32 pixels; the last label byte is used."""
    path = Path(path)
    data = np.fromfile(path, dtype=np.uint8)
    record = label_bytes + 3 * 32 * 32
    if data.size == 0 or data.size % record:
        raise ValueError(f"{path}: {data.size} bytes is not a whole number of {record}-byte CIFAR records")
    rows = data.reshape(-1, record)
    images = torch.from_numpy(rows[:, label_bytes:].reshape(-1, 3, 32, 32).copy())
    return images, torch.from_numpy(rows[:, label_bytes - 1].astype(np.int64))


def load_cifar(name: str, split: str, data_dir: str | Path | None = None) -> ImageDataset:
    """CIFAR-10/100 from the official binary (.bin) releases, never the pickled python version."""
    layout = CIFAR[name]
    bases = [*_user_dirs(data_dir), cache_dir()]
    places = [p for base in bases for p in (base / layout.folder, base)]
    for place in places:
        paths = [place / f for f in layout.files[split]]
        if all(p.is_file() for p in paths):
            parts = [read_cifar_bin(p, layout.label_bytes) for p in paths]
            images = torch.cat([im for im, _ in parts])
            labels = torch.cat([lb for _, lb in parts])
            if labels.max() >= len(layout.classes):
                raise ValueError(
                    f"{place}: label {int(labels.max())} out of range for {len(layout.classes)} classes"
                )
            description = f"{layout.title} {split} ({len(labels)} images) from {place}"
            return ImageDataset(images, labels, list(layout.classes), description)
    raise FileNotFoundError(
        f"{layout.title} {split} ({', '.join(layout.files[split])}) not found in: "
        f"{', '.join(str(p) for p in places)}. Download {layout.url}, extract it into one of these "
        f"(or into DIR and pass --data-dir DIR / set VITKIT_DATA)"
    )


# ------------------------------------------------------------------------------------ small builtins


SYNTHETIC_SIZES = {"train": 600, "test": 200}
SYNTHETIC_CLASSES = [
    "disc", "square", "ring", "cross", "h_stripes", "v_stripes", "diagonal", "triangle", "checker", "diamond",
]  # fmt: skip
_PALETTE = np.array(
    [[230, 60, 60], [60, 200, 60], [70, 90, 240], [240, 200, 40], [200, 60, 220],
     [40, 210, 220], [250, 140, 30], [150, 150, 150], [240, 240, 240], [120, 70, 20]],
    dtype=np.float64,
)  # fmt: skip


def make_synthetic(split: str) -> ImageDataset:
    """10 classes of jittered coloured shapes/patterns, 32x32 RGB: learnable in seconds, for tests."""
    n = SYNTHETIC_SIZES[split]
    rng = np.random.default_rng(SPLITS.index(split))
    labels = np.arange(n) % 10
    coords = (np.arange(32) + 0.5) / 16.0 - 1.0  # pixel centres in [-1, 1]
    dy = coords[None, :, None] - rng.uniform(-0.25, 0.25, (n, 1, 1))
    dx = coords[None, None, :] - rng.uniform(-0.25, 0.25, (n, 1, 1))
    r = rng.uniform(0.45, 0.7, (n, 1, 1))
    freq = rng.uniform(5.0, 8.0, (n, 1, 1))
    dist = np.hypot(dx, dy)
    inside = np.maximum(np.abs(dx), np.abs(dy)) < r
    masks = np.stack(
        np.broadcast_arrays(
            dist < r,
            np.maximum(np.abs(dx), np.abs(dy)) < 0.85 * r,
            np.abs(dist - 0.75 * r) < 0.12,
            ((np.abs(dx) < 0.15) | (np.abs(dy) < 0.15)) & inside,
            np.sin(freq * dy) > 0,
            np.sin(freq * dx) > 0,
            np.sin(freq * (dx + dy)) > 0,
            (dy < 0.8 * r) & (np.abs(dx) < (dy + 0.8 * r) / 2),
            (np.sin(freq * dx) > 0) ^ (np.sin(freq * dy) > 0),
            np.abs(dx) + np.abs(dy) < r,
        ),
        1,
    )[np.arange(n), labels]
    colour = _PALETTE[labels] + rng.normal(0, 15, (n, 3))
    background = rng.uniform(0, 60, (n, 3, 1, 1)) + rng.normal(0, 12, (n, 3, 32, 32))
    pixels = np.where(masks[:, None], colour[:, :, None, None], background)
    images = torch.from_numpy(np.clip(np.round(pixels), 0, 255).astype(np.uint8))
    description = f"synthetic {split} ({n} images of 10 shape classes, 32x32 RGB, generated by vitkit)"
    return ImageDataset(
        images, torch.from_numpy(labels.astype(np.int64)), list(SYNTHETIC_CLASSES), description
    )


def load_digits(split: str) -> ImageDataset:
    """scikit-learn's 8x8 digits (1797 images, values 0-16 scaled to 0-255); every 5th of a class is test."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as err:
        raise ModuleNotFoundError("dataset 'digits' needs scikit-learn: pip install scikit-learn") from err
    digits = sklearn_digits()
    test = np.zeros(len(digits.target), dtype=bool)
    for digit in range(10):
        test[np.flatnonzero(digits.target == digit)[::5]] = True
    chosen = test if split == "test" else ~test
    images = np.round(digits.images[chosen] * (255.0 / 16.0)).astype(np.uint8)[:, None]
    description = (
        f"scikit-learn digits {split} ({int(chosen.sum())} images, 8x8 grey, every 5th of a class is test)"
    )
    return ImageDataset(
        torch.from_numpy(images),
        torch.from_numpy(digits.target[chosen].astype(np.int64)),
        [str(d) for d in range(10)],
        description,
    )
