"""What a `data.source` string names, and opening one split of it.

fashion_mnist, cifar10, cifar100, synthetic, digits   decoded once into memory (vitkit.data.builtin)
folder:PATH  (or a bare directory PATH)                ImageFolder PATH/train, PATH/test|val, read lazily
hf:PATH                                                a Hugging Face `datasets` directory, memory-mapped
wds:DIR  (or wds:PATTERN)                              WebDataset tar shards (DIR/<split>/*.tar, DIR/<split>-*.tar,
                                                       train-{0000..0099}.tar), streamed
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .builtin import NAMES, load_dataset
from .folder import FolderSource
from .hf_datasets import HFSource
from .shards import ShardSource
from .source import DEFAULT_READING, ReadOptions, Source

READERS: dict[str, Callable[[Path | str, str, ReadOptions], Source]] = {
    "folder": FolderSource,
    "hf": HFSource,
    "wds": ShardSource,
}
PREFIXES = tuple(f"{kind}:" for kind in READERS)


def open_source(
    spec: str, split: str, data_dir: str | None = None, options: ReadOptions = DEFAULT_READING
) -> Source:
    """One split ('train' or 'test') of the source `spec` names; `options` say how a source read per sample or
    streamed is read (in-memory datasets are decoded at once and ignore them)."""
    kind, sep, path = spec.partition(":")
    if sep and f"{kind}:" in PREFIXES:
        if not path:
            raise ValueError(f"data.source {spec!r} names no path (expected {kind}:PATH)")
        location = path if kind == "wds" else _directory(path, spec)  # wds: a directory or a brace pattern
        return READERS[kind](location, split, options)
    if spec in NAMES:
        return load_dataset(spec, split, data_dir)
    if Path(spec).expanduser().is_dir():
        return FolderSource(spec, split, options)
    if os.sep in spec or "/" in spec:
        raise FileNotFoundError(f"{spec}: no such ImageFolder directory (expected {spec}/train, {spec}/test)")
    raise ValueError(
        f"unknown data.source {spec!r}: expected one of {', '.join(NAMES)}, folder:PATH, hf:PATH or wds:DIR"
    )


def _directory(path: str, spec: str) -> Path:
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory (data.source {spec!r})")
    return directory
