"""The run lock belongs to the process that took it: a forked child (a DataLoader worker) never holds it, and a
lock whose holder has ended on this host, still held by a process it left, is taken over with a line."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from vitkit.training.rundir import RunDirBusy, RunDirLock


def test_a_forked_child_never_holds_the_lock(tmp_path: Path) -> None:
    lock = RunDirLock(tmp_path / "run").acquire()
    assert lock.fd is not None
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # a DataLoader worker, forked while the lock is held
        try:
            try:
                os.fstat(lock.fd)
                os.write(write_end, b"inherited")
            except OSError:
                os.write(write_end, b"closed")
            signal.pause()
        finally:
            os._exit(0)
    try:
        assert os.read(read_end, 16) == b"closed"
        lock.release()
        again = RunDirLock(tmp_path / "run").acquire()  # at once, the child still running
        again.release()
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(read_end)
        os.close(write_end)


def test_a_lock_held_only_by_what_an_ended_holder_left_is_taken_over(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    read_end, write_end = os.pipe()
    holder = os.fork()
    if holder == 0:  # takes the lock, hands its descriptor to a program it starts (no fork hook), ends
        try:
            lock = RunDirLock(run).acquire()
            orphan = subprocess.Popen(["sleep", "60"], pass_fds=[lock.fd])
            os.write(write_end, str(orphan.pid).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    orphan_pid = int(os.read(read_end, 16))
    os.close(read_end)
    os.waitpid(holder, 0)
    try:
        assert flock_held(run / ".lock")  # the orphan holds the old lock file's lock...
        lock = RunDirLock(run).acquire()  # ...which the holder's end frees for the taking
        err = capsys.readouterr().err
        assert (
            f"process {holder} on host {socket.gethostname()} has ended" in err
            and "taking the lock over" in err
        )
        assert (run / ".lock").read_text() == f"process {os.getpid()} on host {socket.gethostname()}\n"
        with pytest.raises(RunDirBusy, match=f"in use by process {os.getpid()}"):
            RunDirLock(run).acquire()  # a live holder is never taken over
        lock.release()
    finally:
        os.kill(orphan_pid, signal.SIGKILL)


def flock_held(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
