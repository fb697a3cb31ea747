"""One writer per run directory, and what a killed writer leaves behind.

A process writing a run directory holds an exclusive `flock` on `<run>/.lock`. The kernel releases it when the
process ends, however it ends (SIGKILL included), so a lock is never stale; a second process asking for it is
refused with the holder's pid and host, before it reads or removes anything. Only the holder removes leftovers:
the `.tmp-*` checkpoint directories and the `.<name>.*.tmp` files of atomic writes a killed writer left.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
from pathlib import Path

from vitkit.storage import FINAL_DIR
from vitkit.train.checkpoint import CHECKPOINT_DIR

LOCK_NAME = ".lock"


class RunDirBusy(RuntimeError):
    """Another live process writes this run directory."""


class RunDirLock:
    """The exclusive lock on a run directory, held from `acquire()` until `release()` or the process ends."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        self.fd: int | None = None

    def acquire(self) -> RunDirLock:
        """Take the lock (creating the directory), or raise RunDirBusy naming the holder."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 256).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunDirBusy(
                f"{self.run_dir}: in use by {holder}; one process writes a run directory at a time "
                f"(wait for it to end or stop it, or choose another --out)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on host {socket.gethostname()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the last descriptor releases the flock
            self.fd = None


def remove_leftovers(run_dir: str | os.PathLike) -> list[Path]:
    """Delete what a killed writer left (temporary checkpoint directories, half-written atomic files); call it
    only while holding the run's lock. Returns what was removed."""
    run_dir = Path(run_dir)
    checkpoints = run_dir / CHECKPOINT_DIR
    found = [
        *(checkpoints.glob(".tmp-*") if checkpoints.is_dir() else []),
        *run_dir.glob(".*.tmp"),
        *((run_dir / FINAL_DIR).glob(".*.tmp") if (run_dir / FINAL_DIR).is_dir() else []),
    ]
    for path in found:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return found
