"""An ImageFolder (root/<split>/<class>/<image>) read lazily: the file index built once, each image decoded when
a DataLoader worker needs it.

The index is one os.scandir pass over the class folders (no stat or open per file: ~100k files a second on a
local disk) held in numpy arrays, and is cached nowhere: nothing is written next to the user's images.
Sample i is the i-th file in (class, file name) order, the order of torchvision's ImageFolder.

Only regular files are taken: a FIFO, socket, device or broken symbolic link with an image extension is skipped
with a line on stderr (opening a FIFO would block for ever); a symbolic link loop is a one-line error. Folder and
file names that are not valid UTF-8 are shown (classes, messages, reports) with their bad bytes as `\\xNN`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

from .decode import IMAGE_EXTENSIONS, file_kind, printable, read_file
from .lazy import TEST_SPLITS, LazySource
from .source import DEFAULT_READING, ReadOptions


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


def _is_dir(entry: os.DirEntry) -> bool:
    """Whether an entry is (or links to) a directory; a symbolic link loop is a one-line error."""
    try:
        return entry.is_dir()
    except OSError as error:
        raise ValueError(
            f"{printable(entry.path)}: {error.strerror} (a symbolic link loop?); remove it"
        ) from None


def class_folders(directory: Path) -> list[str]:
    """The class folder names under `directory`, sorted (hidden folders left out)."""
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if not e.name.startswith(".") and _is_dir(e))


def image_files(directory: Path) -> list[str]:
    """Image file names in one class folder, sorted; sub-folders are walked too (their relative paths), each
    directory once (a symbolic link back to a folder above is a one-line error)."""
    names = []
    stack = [""]
    seen = {_identity(directory)}
    while stack:
        prefix = stack.pop()
        with os.scandir(directory / prefix if prefix else directory) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                relative = f"{prefix}{entry.name}"
                if _is_dir(entry):
                    if _identity(Path(entry.path)) in seen:
                        raise ValueError(
                            f"{printable(entry.path)}: a symbolic link loop (a directory already read); remove it"
                        )
                    seen.add(_identity(Path(entry.path)))
                    stack.append(relative + "/")
                elif os.path.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS:
                    if _regular_file(entry):
                        names.append(relative)
    return sorted(names)


def _identity(directory: Path) -> tuple[int, int]:
    info = directory.stat()
    return info.st_dev, info.st_ino


def _regular_file(entry: os.DirEntry) -> bool:
    """Whether an image-named entry is (or links to) a regular file; anything else is skipped with a line."""
    try:
        if entry.is_file():
            return True
        kind = file_kind(entry.stat().st_mode)
    except FileNotFoundError:
        kind = "a broken symbolic link"
    except OSError as error:
        raise ValueError(
            f"{printable(entry.path)}: {error.strerror} (a symbolic link loop?); remove it"
        ) from None
    print(f"skipping {printable(entry.path)}: {kind}, not a regular file", file=sys.stderr)
    return False


class FolderSource(LazySource):
    """One split of an ImageFolder: classes are the folders of root/train, in sorted order, for every split.

    An empty class folder in train, or a class folder in test/val that train does not have, is a one-line error:
    a label must mean the same class in both splits. `classes` are the folder names as printable text.
    """

    reader = "ImageFolder, decoded per sample (Pillow)"

    def __init__(self, root: str | os.PathLike, split: str, options: ReadOptions = DEFAULT_READING) -> None:
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
                    f"{directory}: class folder(s) {', '.join(map(printable, unknown))} not in {root / 'train'}; "
                    f"every {split} class must also be a training class"
                )
        paths, labels = [], []
        for label, name in enumerate(classes):
            files = image_files(directory / name) if (directory / name).is_dir() else []
            if not files and directory == root / "train":
                raise ValueError(
                    f"{printable(str(directory / name))}: empty class folder (no image files); remove it or add images"
                )
            paths += [f"{name}/{file}" for file in files]
            labels += [label] * len(files)
        if not paths:
            raise FileNotFoundError(f"{directory}: no image files ({', '.join(sorted(IMAGE_EXTENSIONS))})")
        description = f"ImageFolder {printable(str(directory))} ({len(paths)} images, {len(classes)} classes, decoded per sample)"
        names = [printable(name) for name in classes]
        if len(set(names)) < len(names):
            raise ValueError(
                f"{root / 'train'}: two class folders print as the same name ({', '.join(names)})"
            )
        super().__init__(torch.tensor(labels, dtype=torch.int64), names, description, options)
        self.directory = directory
        # Fixed-width bytes: one numpy buffer, shared by forked workers (no per-path Python objects).
        self.paths = np.array([os.fsencode(p) for p in paths], dtype=np.bytes_)

    def path(self, index: int) -> bytes:
        """The file of sample `index` (bytes: any file name, UTF-8 or not)."""
        return self._path(int(self.positions[index]))

    def _bytes(self, position: int) -> bytes:
        return read_file(self._path(position), self._name(position))

    def _path(self, position: int) -> bytes:  # bytes: any file name, UTF-8 or not
        return os.path.join(os.fsencode(self.directory), self.paths[position])

    def _name(self, position: int) -> str:
        return printable(os.fsdecode(self._path(position)))
