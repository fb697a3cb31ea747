"""Files the reliability tests make on disk: small ImageFolders (class names of any bytes) and sparse files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image


def grey_folder(root: Path, classes: tuple[str | bytes, ...] = ("a", "b"), per_class: int = 4) -> Path:
    """root/{train,test}/<class>/<i>.png: 28x28 grey images, each class its own brightness (learnable at once).
    A class given as bytes is a folder name that is not UTF-8."""
    for split in ("train", "test"):
        for label, name in enumerate(classes):
            folder = os.path.join(os.fsencode(root / split), os.fsencode(name))
            os.makedirs(folder)
            for i in range(per_class):
                pixels = np.full((28, 28), 30 + 200 // len(classes) * label + i, np.uint8)
                Image.fromarray(pixels, "L").save(os.fsdecode(os.path.join(folder, b"%d.png" % i)))
    return root


def sparse_file(path: Path, size: int = 2**30) -> Path:
    """A file of `size` bytes that takes no disk space (truncate): a 1 GB non-image by default."""
    with open(path, "wb") as file:
        file.truncate(size)
    return path
