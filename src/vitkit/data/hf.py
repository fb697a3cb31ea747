"""A Hugging Face `datasets` directory as a lazy source: memory-mapped Arrow rows, each image decoded when read.

Accepted directories: what `Dataset(Dict).save_to_disk` writes (read in place, memory-mapped: nothing is copied),
a directory of Parquet files, or one that the `imagefolder` builder reads (both converted once by `datasets`
into its own cache, HF_DATASETS_CACHE). The image column is the first `Image` feature; the label column the
first `ClassLabel` feature (its names are the classes), else an integer column called `label` or `labels`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .decode import ImageDecodeError
from .lazy import TEST_SPLITS, LazySource


def load_hf(path: Path) -> Any:
    """The DatasetDict (or Dataset) in `path`, memory-mapped when written by save_to_disk."""
    try:
        import datasets  # optional: only hf: sources need it
    except ImportError:
        raise ModuleNotFoundError(
            "data.source 'hf:...' needs the datasets package: pip install datasets"
        ) from None
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return datasets.load_from_disk(str(path))
    builder = "parquet" if next(path.rglob("*.parquet"), None) is not None else "imagefolder"
    return datasets.load_dataset(builder, data_dir=str(path))


def pick_split(data: Any, split: str, path: Path) -> tuple[Any, str]:
    """The split of a DatasetDict ('test' also accepts 'validation' or 'val'); a lone Dataset is 'train' only."""
    if not hasattr(data, "keys"):
        if split == "train":
            return data, "train"
        raise FileNotFoundError(
            f"{path}: holds one split (saved as a Dataset); the test split needs a DatasetDict"
        )
    names = [split] if split == "train" else list(TEST_SPLITS)
    found = next((name for name in names if name in data), None)
    if found is None:
        raise FileNotFoundError(f"{path}: no {' or '.join(names)} split (it has {', '.join(data.keys())})")
    return data[found], found


def columns(table: Any, path: Path) -> tuple[str, str, list[str] | None]:
    """(image column, label column, class names or None) from the features."""
    import datasets

    features = table.features
    image = next((name for name, f in features.items() if isinstance(f, datasets.Image)), None)
    if image is None:
        raise ValueError(f"{path}: no Image column (features: {', '.join(features)})")
    label = next((name for name, f in features.items() if isinstance(f, datasets.ClassLabel)), None)
    if label is not None:
        return image, label, list(features[label].names)
    label = next((name for name in ("label", "labels") if name in features), None)
    if label is None:
        raise ValueError(
            f"{path}: no ClassLabel column and no 'label' column (features: {', '.join(features)})"
        )
    return image, label, None


def integer_column(table: Any, name: str) -> np.ndarray:
    """A column as int64, read as Arrow (milliseconds; numpy formatting takes ~20 s for 60,000 rows)."""
    return np.array(table.with_format("arrow")[name].to_numpy(), dtype=np.int64)  # a writable copy


class HFSource(LazySource):
    """One split of a `datasets` directory; classes come from the ClassLabel names of the training split (or
    0..max label of an integer column), so a label means the same class in every split."""

    reader = "Hugging Face datasets (memory-mapped Arrow), decoded per sample"

    def __init__(self, path: str | os.PathLike, split: str, **options) -> None:
        import datasets

        path = Path(path).expanduser()
        data = load_hf(path)
        table, name = pick_split(data, split, path)
        train = pick_split(data, "train", path)[0]
        image, label, classes = columns(train, path)
        if name != "train" and (image, label) != columns(table, path)[:2]:
            raise ValueError(f"{path}: the {name} split has other image/label columns than train")
        labels = integer_column(table, label)
        if classes is None:
            top = int(integer_column(train, label).max(initial=0))
            classes = [str(i) for i in range(top + 1)]
        bad = np.flatnonzero((labels < 0) | (labels >= len(classes)))
        if len(bad):
            raise ValueError(
                f"{path} [{name}] row {int(bad[0])}: label {int(labels[bad[0]])} out of range for {len(classes)} "
                f"classes ({len(bad)} such rows)"
            )
        source = f"Hugging Face dataset {path} [{name}] ({len(labels)} images, {len(classes)} classes, decoded per sample)"
        super().__init__(torch.from_numpy(labels), classes, source, **options)
        self.path, self.split = path, name
        self.image_column = image
        self.table = table.cast_column(image, datasets.Image(decode=False)).select_columns([image])

    def _bytes(self, position: int) -> bytes:
        cell = self.table[position][self.image_column]
        if cell.get("bytes") is not None:
            return cell["bytes"]
        if not cell.get("path"):
            raise ImageDecodeError(
                f"{self._name(position)}: no image bytes or path in column {self.image_column!r}"
            )
        with open(cell["path"], "rb") as file:
            return file.read()

    def _name(self, position: int) -> str:
        return f"{self.path} [{self.split}] row {position}"
