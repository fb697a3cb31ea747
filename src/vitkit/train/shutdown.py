"""A bounded end to a run, however it ends: SIGTERM stops it like Ctrl-C, and each closing step has a time limit.

A run stopped by Ctrl-C or SIGTERM (torchrun's, a scheduler's) unwinds through the engine's `finally`: the data
workers stop first, then what is written is flushed and closed. A closing step that does not return in time (a
TensorBoard writer waiting on its thread, a worker blocked on a read) is left behind with a line saying so, and
the process ends anyway: its workers are daemons, killed as it exits.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

CLOSE_SECONDS = 3.0  # each closing step's limit: a few of them stay well under the 10 s a user waits


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as an interruption so that the run closes what it opened."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread; elsewhere, and
    outside it, SIGTERM keeps its handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def bounded(what: str, close: Callable[[], object], seconds: float = CLOSE_SECONDS) -> None:
    """Run `close` for at most `seconds` (in a daemon thread); past that, say so on stderr and go on. An exception
    it raises is raised here."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            close()
        except BaseException as error:  # handed to the caller's thread
            failure.append(error)

    thread = threading.Thread(target=run, name=f"close {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        print(f"{what}: not closed after {seconds:g} s; going on without it", file=sys.stderr)
        return
    if failure:
        raise failure[0]
