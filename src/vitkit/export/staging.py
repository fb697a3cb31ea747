"""Exports are written beside their destination, checked there, and only then moved into place: a failed
export or check leaves no file, and a reader never sees a half-written one. The scratch directory carries the
writer's pid (vitkit.storage.temporary_prefix), so that one left by a killed process is removed by the next write
to the same destination."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vitkit.storage import TEMPORARY_SUFFIX, remove_stale_temporaries, temporary_prefix


@contextlib.contextmanager
def _scratch(path: Path) -> Iterator[Path]:
    """A fresh directory beside `path`, removed at the end whatever happens."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    directory = Path(
        tempfile.mkdtemp(dir=path.parent, prefix=temporary_prefix(path), suffix=TEMPORARY_SUFFIX)
    )
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _move_files(source: Path, destination: Path, last: str) -> None:
    """fsync and rename every file of `source` into `destination`, the one called `last` at the end."""
    for file in sorted((f for f in source.iterdir() if f.is_file()), key=lambda f: f.name == last):
        with open(file, "rb") as f:
            os.fsync(f.fileno())
        os.replace(file, destination / file.name)


@contextlib.contextmanager
def staged(path: str | os.PathLike) -> Iterator[Path]:
    """A path of the same name in a fresh directory beside `path`. On success each file written there (the
    ONNX file and its external-data file, when it has one) replaces its namesake beside `path`, sidecars first;
    on failure nothing is left."""
    path = Path(path)
    with _scratch(path) as directory:
        yield directory / path.name
        _move_files(directory, path.parent, last=path.name)


@contextlib.contextmanager
def staged_directory(path: str | os.PathLike, last: str = "config.json") -> Iterator[Path]:
    """A fresh directory beside `path` to write a whole directory's files into; on success they are moved into
    `path` (made if missing), `last` (the file that makes it loadable) at the end; on failure nothing is left."""
    path = Path(path)
    with _scratch(path) as directory:
        yield directory
        path.mkdir(parents=True, exist_ok=True)
        _move_files(directory, path, last=last)
