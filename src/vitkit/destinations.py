"""Where a command writes its result, checked before any work: nothing of the user's is replaced by accident.

A file destination must be missing or a regular file (a device, FIFO, socket or symbolic link there is refused,
never replaced: `vitkit convert w /dev/null` run as root would otherwise swap /dev/null for a file); a directory
destination must be missing, empty, or a directory (not a link). An existing file, or a directory holding
anything, is replaced or written into only when the caller says so (`--overwrite`, `overwrite=True`). The
directory that will receive the file must accept a new file there, tried by creating one: a read-only or full
mount, a directory without write permission, fails at once, naming the destination, not after minutes of work.
Leftovers of a killed earlier write to the same destination are removed first (vitkit.storage).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from vitkit.data.decode import file_kind
from vitkit.storage import nearest_existing, remove_stale_temporaries


def check_file_destination(path: str | os.PathLike, *, overwrite: bool, flag: str = "--overwrite") -> Path:
    """`path` (a file to be written) when it may be written; a one-line ValueError (or PermissionError) else."""
    path = Path(path)
    info = _lstat(path)
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            raise ValueError(
                f"{path}: is a symbolic link; vitkit never replaces one: remove it or write elsewhere"
            )
        if stat.S_ISDIR(info.st_mode):
            raise ValueError(f"{path}: is a directory; a file is written here")
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(
                f"{path}: is {file_kind(info.st_mode)}, not a regular file; vitkit never replaces it"
            )
        if not overwrite:
            raise ValueError(f"{path}: exists; pass {flag} to replace it")
    _check_writable(path, path.parent)
    remove_stale_temporaries(path)
    return path


def check_directory_destination(
    path: str | os.PathLike, *, overwrite: bool, flag: str = "--overwrite"
) -> Path:
    """`path` (a directory to write files into) when it may be written; a one-line error else."""
    path = Path(path)
    info = _lstat(path)
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            raise ValueError(f"{path}: is a symbolic link; vitkit never writes through one: write elsewhere")
        if not stat.S_ISDIR(info.st_mode):
            raise ValueError(f"{path}: is {file_kind(info.st_mode)}, not a directory")
        found = sorted(p.name for p in path.iterdir())
        if found and not overwrite:
            shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
            raise ValueError(f"{path}: not empty (holds {shown}); pass {flag} to write into it")
    _check_writable(path, path)
    remove_stale_temporaries(path)
    return path


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None


def _check_writable(destination: Path, directory: Path) -> None:
    """Create (and remove) a file where `destination` will be written: the only test that a read-only mount, an
    ACL or a full quota cannot fool."""
    existing = nearest_existing(directory)
    if not existing.is_dir():
        raise ValueError(
            f"{destination}: {existing} is {file_kind(existing.stat().st_mode)}, not a directory"
        )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise type(error)(error.errno, error.strerror, str(destination)) from None
