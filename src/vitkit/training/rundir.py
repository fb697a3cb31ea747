"""One writer per run directory, and what a killed writer leaves behind.

A process writing a run directory holds an exclusive `flock` on `<run>/.lock`, whose content names it
(`process PID on host HOST`). A flock belongs to the open file, which `fork` shares with the child: so every
forked child (DataLoader workers, anything else) closes the lock's descriptor as it starts (os.register_at_fork),
and no child ever holds the lock. The kernel releases it when the holder ends, however it ends (SIGKILL
included). Should a descriptor still reach another process (a child forked without Python's fork hooks), a lock
whose named holder has ended on this host is taken over, with a line on stderr saying so. A second process asking
for a live holder's lock is refused with that holder's pid and host, before it reads or removes anything. Only
the holder removes leftovers: the `.tmp-*` checkpoint directories and the `.<name>.*.tmp` files of atomic
writes a killed writer left.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path

from vitkit.recipe.run_config import RECIPE_NAME, RunConfig
from vitkit.storage import FINAL_DIR, atomic_write_text
from vitkit.training.checkpoint import CHECKPOINT_DIR, SavedCheckpoint, latest_checkpoint, read_checkpoint

LOCK_NAME = ".lock"
HOLDER = re.compile(r"process (\d+) on host (\S+)")
TAKEOVER_WAIT = 2.0  # seconds a taker waits for another taker of the same run directory
_held: set[int] = set()  # descriptors of the locks (and takeover guards) this process holds


def _close_held_in_child() -> None:
    """In a forked child: close the parent's lock descriptors, so that the child never holds a run's lock."""
    for fd in _held:
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


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
        path = self.run_dir / LOCK_NAME
        fd, holder = _try_lock(path)
        if fd is None and holder_ended(holder):
            fd, holder = self._take_over(path, holder)
        if fd is None:
            raise RunDirBusy(
                f"{self.run_dir}: in use by {holder or 'another process'}; one process writes a run directory at "
                f"a time (wait for it to end or stop it, or choose another --out)"
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on host {socket.gethostname()}\n".encode())
        self.fd = fd
        return self

    def _take_over(self, path: Path, ended: str) -> tuple[int | None, str]:
        """Replace a lock file whose holder has ended (held by what it left) with a new one, locked. Takers of one
        run serialise on a flock of the directory itself, and each looks again once it has it."""
        guard = os.open(self.run_dir, os.O_RDONLY | os.O_CLOEXEC)
        _held.add(guard)
        try:
            deadline = time.monotonic() + TAKEOVER_WAIT
            while True:
                try:
                    fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        return None, ended
                    time.sleep(0.05)
            fd, holder = _try_lock(path)
            if fd is not None or not holder_ended(holder):
                return fd, holder
            path.unlink()
            fd, holder = _try_lock(path)
            if fd is not None:
                print(
                    f"{self.run_dir}: {holder or ended} has ended but processes it left still held its lock; "
                    f"taking the lock over",
                    file=sys.stderr,
                )
            return fd, holder
        finally:
            _held.discard(guard)
            os.close(guard)

    def release(self) -> None:
        if self.fd is not None:
            _held.discard(self.fd)
            os.close(self.fd)  # closing the last descriptor releases the flock
            self.fd = None


def _try_lock(path: Path) -> tuple[int | None, str]:
    """(the locked descriptor of `path`, "") or (None, the holder's line) when another open file holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    _held.add(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 256).decode(errors="replace").strip()
        _held.discard(fd)
        os.close(fd)
        return None, holder
    return fd, ""


def holder_ended(holder: str) -> bool:
    """Whether a lock's holder line names a process of this host that no longer runs (or is a zombie)."""
    match = HOLDER.fullmatch(holder)
    if match is None or match[2] != socket.gethostname() or int(match[1]) == os.getpid():
        return False
    pid = int(match[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # killed but not yet reaped by its parent: it holds nothing any more
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


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


def open_run_dir(run_dir: Path, lock: RunDirLock, resume: bool) -> SavedCheckpoint | None:
    """The checkpoint to resume, read (locking the run and removing a killed writer's leftovers first); for a new run,
    a refusal to overwrite an existing one. Nothing is written for a new run yet."""
    if resume:
        lock.acquire()
        remove_leftovers(run_dir)
        latest = latest_checkpoint(run_dir)
        return read_checkpoint(latest) if latest is not None else None
    _refuse_existing(run_dir)
    return None


def create_run_dir(run_dir: Path, config: RunConfig, lock: RunDirLock) -> None:
    """Create and lock the directory of a new run and save its recipe."""
    lock.acquire()
    _refuse_existing(run_dir)  # again under the lock: another process may have started the same --out
    atomic_write_text(run_dir / RECIPE_NAME, config.to_toml())


def _refuse_existing(run_dir: Path) -> None:
    """A new run writes only into a missing or empty directory (its lock file aside): never over a run, and
    never into a directory of the user's, whose files it could overwrite or delete."""
    if (run_dir / RECIPE_NAME).exists():
        raise ValueError(
            f"{run_dir} already holds a run; pass --resume to continue it or choose another --out"
        )
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--out {run_dir}: is a file, not a directory; choose another --out")
    found = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME) if run_dir.is_dir() else []
    if found:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise ValueError(
            f"--out {run_dir}: not empty and not a vitkit run (holds {shown}); a new run needs a missing or "
            f"empty directory, so nothing of yours is overwritten: choose another --out"
        )
