"""Exports are written beside their destination, checked there, and only then moved into place: a failed
export or check leaves no file, and a reader never sees a half-written one."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def staged(path: str | os.PathLike) -> Iterator[Path]:
    """A path of the same name in a fresh directory beside `path`. On success each file written there (the
    ONNX file and its external-data file, when it has one) replaces its namesake beside `path`, sidecars first;
    on failure nothing is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield directory / path.name
        files = [f for f in directory.iterdir() if f.is_file()]
        staged_files = sorted(files, key=lambda f: f.name == path.name)  # the main file last
        for file in staged_files:
            with open(file, "rb") as f:
                os.fsync(f.fileno())
            os.replace(file, path.parent / file.name)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
