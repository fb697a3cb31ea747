"""The pieces of a bounded shutdown, in this process: SIGTERM raised as an interruption, a closing step that hangs
left behind after its time limit."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from vitkit.train.shutdown import Terminated, bounded, sigterm_interrupts


def test_sigterm_interrupts_inside_the_block_only() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted long before
    assert signal.getsignal(signal.SIGTERM) is before
    assert issubclass(Terminated, KeyboardInterrupt)  # the command line's "interrupted", exit code 130


def test_a_closing_step_that_hangs_is_left_after_its_limit(capsys) -> None:
    release = threading.Event()
    start = time.monotonic()
    bounded("a stuck writer", release.wait, seconds=0.2)
    assert time.monotonic() - start < 2
    assert "a stuck writer: not closed after 0.2 s; going on without it" in capsys.readouterr().err
    release.set()
    with pytest.raises(OSError, match="disk"):  # a failure within the limit is the caller's
        bounded("a failing writer", lambda: (_ for _ in ()).throw(OSError("disk")))
