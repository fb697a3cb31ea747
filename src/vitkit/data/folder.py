"""An ImageFolder (root/<split>/<class>/<image>) read lazily: the file index built once, each image decoded when
a DataLoader worker needs it.

The index is one os.scandir pass over the class folders (no stat or open per file: ~100k files a second on a
local disk) held in numpy arrays, and is cached nowhere: nothing is written next to the user's images.
Sample i is the i-th file in (class, file name) order, the order of torchvision's ImageFolder.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from .decode import IMAGE_EXTENSIONS
from .lazy import TEST_SPLITS, LazySource


def split_directory(root: Path, split: str) -> Path:
    """root/train for 'train'; root/test, else root/validation, else root/val, for 'test'. A one-line error lists
    what is missing."""
    candidates = [root / "train"] if split == "train" else [root / name for name in TEST_SPLITS]
    found = next((d for d in candidates if d.is_dir()), None)
    if found is None or not (root / "train").is_dir():
        wanted = sorted({str(d) for d in [*candidates, root / "train"]})
        raise FileNotFoundError(
            f"ImageFolder {split} needs the directories {', '.join(wanted)} (one folder per class)"
        )
    return found


def class_folders(directory: Path) -> list[str]:
    """The class folder names under `directory`, sorted (hidden folders left out)."""
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))


def image_files(directory: Path) -> list[str]:
    """Image file names in one class folder, sorted; sub-folders are walked too (their relative paths)."""
    names = []
    stack = [""]
    while stack:
        prefix = stack.pop()
        with os.scandir(directory / prefix if prefix else directory) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                relative = f"{prefix}{entry.name}"
                if entry.is_dir():
                    stack.append(relative + "/")
                elif os.path.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS:
                    names.append(relative)
    return sorted(names)


class FolderSource(LazySource):
    """One split of an ImageFolder: classes are the folders of root/train, in sorted order, for every split.

    An empty class folder in train, or a class folder in test/val that train does not have, is a one-line error:
    a label must mean the same class in both splits.
    """

    reader = "ImageFolder, decoded per sample (Pillow)"

    def __init__(self, root: str | os.PathLike, split: str, **options) -> None:
        root = Path(root).expanduser()
        directory = split_directory(root, split)
        classes = class_folders(root / "train")
        if not classes:
            raise FileNotFoundError(
                f"{root / 'train'}: no class folders (expected {root / 'train'}/<class>/<image>)"
            )
        if directory != root / "train":
            unknown = sorted(set(class_folders(directory)) - set(classes))
            if unknown:
                raise ValueError(
                    f"{directory}: class folder(s) {', '.join(unknown)} not in {root / 'train'}; every {split} class "
                    f"must also be a training class"
                )
        paths, labels = [], []
        for label, name in enumerate(classes):
            files = image_files(directory / name) if (directory / name).is_dir() else []
            if not files and directory == root / "train":
                raise ValueError(
                    f"{directory / name}: empty class folder (no image files); remove it or add images"
                )
            paths += [f"{name}/{file}" for file in files]
            labels += [label] * len(files)
        if not paths:
            raise FileNotFoundError(f"{directory}: no image files ({', '.join(sorted(IMAGE_EXTENSIONS))})")
        source = f"ImageFolder {directory} ({len(paths)} images, {len(classes)} classes, decoded per sample)"
        super().__init__(torch.tensor(labels, dtype=torch.int64), classes, source, **options)
        self.directory = directory
        # Fixed-width bytes: one numpy buffer, shared by forked workers (no per-path Python objects).
        self.paths = np.array([os.fsencode(p) for p in paths], dtype=np.bytes_)

    def _bytes(self, position: int) -> bytes:
        with open(self._name(position), "rb") as file:
            return file.read()

    def _name(self, position: int) -> str:
        return os.path.join(self.directory, os.fsdecode(self.paths[position]))
