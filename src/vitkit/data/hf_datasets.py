"""A Hugging Face `datasets` directory as a lazy source: memory-mapped Arrow rows, each image decoded when read.

Accepted directories: what `Dataset(Dict).save_to_disk` writes (read in place, memory-mapped: nothing is copied),
a directory of Parquet files, or one that the `imagefolder` builder reads (both converted once by `datasets`
into its own cache, HF_DATASETS_CACHE). The image column is the first `Image` feature; the label column the
first `ClassLabel` feature, else a column called `label` or `labels`.

Labels are checked, not trusted: every split maps the same class name to the same number.
- ClassLabel: the training split's names are the classes; another split's ClassLabel (a subset, a reordering)
  is re-mapped by name, and a name the training split lacks is refused.
- Strings: class names, as `Dataset.class_encode_column` would encode them: the sorted distinct names of the
  training split are the classes (like ImageFolder's sorted folders), every split mapped by name. A string label
  is how the Hub's CSV/JSON metadata and many community datasets store classes; refusing it would send the user
  to re-encode a dataset whose meaning is already plain.
- Integers: class indices 0..(largest in train), the same number the same class in every split.
Null, float, boolean or out-of-range labels are refused in one line naming the split, column and row.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .decode import ImageDecodeError, read_file
from .lazy import TEST_SPLITS, LazySource
from .source import DEFAULT_READING, ReadOptions


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
    """(image column, label column, ClassLabel names or None) from the features."""
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


class SplitLabels:
    """One split's label column as read: class indices (ClassLabel, integers) or names (ClassLabel, strings)."""

    def __init__(self, table: Any, column: str, names: list[str] | None, where: str) -> None:
        import pyarrow.compute as pc
        import pyarrow.types as pt

        values = table.with_format("arrow")[
            column
        ]  # Arrow: milliseconds, where numpy formatting takes seconds
        self.where, self.column = where, column
        if values.null_count:
            row = pc.index(values.is_null(), True).as_py()
            raise ValueError(f"{where} row {row}: label is null (column {column!r}); every row needs a label")
        self.codes: (
            np.ndarray
        )  # each row's index into self.vocabulary (names), else its class index (integers)
        self.vocabulary = names  # ClassLabel names, sorted string labels, or None (integers)
        if pt.is_string(values.type) or pt.is_large_string(values.type):
            distinct, inverse = np.unique(values.to_numpy(zero_copy_only=False), return_inverse=True)
            self.vocabulary, self.codes = [str(name) for name in distinct], inverse.astype(np.int64)
        elif pt.is_integer(values.type):
            self.codes = np.array(values.to_numpy(), dtype=np.int64)  # a writable copy
        else:
            first = values[0].as_py() if len(values) else None
            raise ValueError(
                f"{where} column {column!r}: {values.type} labels (row 0: {first!r}); expected integer class "
                f"indices, class names (strings) or a ClassLabel"
            )

    def in_classes(self, classes: list[str]) -> np.ndarray:
        """Each row's index into `classes`: by name when the split names its labels, else the number itself."""
        codes = self.codes
        if self.vocabulary is None:
            return self._checked(codes, len(classes), "out of range for")
        codes = self._checked(codes, len(self.vocabulary), "out of range for the ClassLabel's")
        index = {name: i for i, name in enumerate(classes)}
        lookup = np.array([index.get(name, -1) for name in self.vocabulary], dtype=np.int64)
        mapped = lookup[codes]
        unknown = np.flatnonzero(mapped < 0)
        if len(unknown):
            row = int(unknown[0])
            raise ValueError(
                f"{self.where} row {row}: class {self.vocabulary[codes[row]]!r} (column {self.column!r}) is not a "
                f"class of the train split ({', '.join(classes[:10])}{', ...' if len(classes) > 10 else ''}); "
                f"{len(unknown)} such rows"
            )
        return mapped

    def _checked(self, codes: np.ndarray, count: int, what: str) -> np.ndarray:
        bad = np.flatnonzero((codes < 0) | (codes >= count))
        if len(bad):
            raise ValueError(
                f"{self.where} row {int(bad[0])}: label {int(codes[bad[0]])} {what} {count} classes "
                f"(column {self.column!r}; {len(bad)} such rows)"
            )
        return codes


class HFSource(LazySource):
    """One split of a `datasets` directory; classes come from the training split (its ClassLabel names, sorted
    string labels, or 0..max of integer labels), and every split's labels are mapped to them by name."""

    reader = "Hugging Face datasets (memory-mapped Arrow), decoded per sample"

    def __init__(self, path: str | os.PathLike, split: str, options: ReadOptions = DEFAULT_READING) -> None:
        import datasets

        path = Path(path).expanduser()
        data = load_hf(path)
        table, name = pick_split(data, split, path)
        train = pick_split(data, "train", path)[0]
        image, label, train_names = columns(train, path)
        found = columns(table, path)
        if name != "train" and (image, label) != found[:2]:
            raise ValueError(f"{path}: the {name} split has other image/label columns than train")
        trained = SplitLabels(train, label, train_names, f"{path} [train]")
        if trained.vocabulary is not None:
            classes = list(trained.vocabulary)
        else:
            classes = [str(i) for i in range(int(trained.codes.max(initial=0)) + 1)]
        split_labels = trained if name == "train" else SplitLabels(table, label, found[2], f"{path} [{name}]")
        if (trained.vocabulary is None) != (split_labels.vocabulary is None):
            raise ValueError(
                f"{path}: the train split's labels are {'numbers' if trained.vocabulary is None else 'names'}, "
                f"the {name} split's {'numbers' if split_labels.vocabulary is None else 'names'} (column "
                f"{label!r}); every split must label the same way"
            )
        labels = split_labels.in_classes(classes)
        description = f"Hugging Face dataset {path} [{name}] ({len(labels)} images, {len(classes)} classes, decoded per sample)"
        super().__init__(torch.from_numpy(labels), classes, description, options)
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
        return read_file(cell["path"], self._name(position))

    def _name(self, position: int) -> str:
        return f"{self.path} [{self.split}] row {position}"
