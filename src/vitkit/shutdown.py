"""A bounded end to a run, however it is stopped: Ctrl-C and SIGTERM stop it every time, and each closing step has a
time limit.

Within `interruptible()`, SIGINT raises KeyboardInterrupt and SIGTERM raises Terminated (one), and the signal is
also recorded: an exception raised where Python ignores exceptions (a fork hook, a `__del__`) would otherwise be
lost, so the training loop asks `raise_if_stopped()` at every step. An error that ends the block once a signal
came (a DataLoader worker that the same signal, sent to the whole process group, ended first) is raised as the
interruption, so the run ends as interrupted whichever process the signal reached first; once stopping, torch's
SIGCHLD check of its workers (which raises wherever the main thread is) is off, after the block too. Inside `deferred()`
(starting DataLoader workers, whose half-built iterator would print a stray traceback if interrupted) a signal is
only recorded and raised when the block ends. A run stopped this way unwinds through the engine's `finally`: the
data workers stop first, then what is written is flushed and closed; a closing step that does not return in time
(a TensorBoard writer waiting on its thread) is left behind with a line saying so (`bounded`), and the process
ends anyway.

Within `finishing_step()` (a training step), the first signal is only recorded: the step goes on to its end, where
the run writes a checkpoint and stops (`stop_requested()`), so nothing it computed is lost. That wait is bounded:
a step still running FINISH_SECONDS after the signal, or a second signal, is interrupted at once as elsewhere.

Once a program has said it was interrupted and is on its way out (`leave_at_next_signal`), one more Ctrl-C or
SIGTERM (a user pressing Ctrl-C twice) ends it at once with the same exit code, instead of a KeyboardInterrupt
traceback from the interpreter's teardown. And a program skips the interpreter's last garbage collection
(`skip_final_collection`), so it exits within a fraction of a second of its last line.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

CLOSE_SECONDS = 3.0  # each closing step's limit: a few of them stay well under the 10 s a user waits
SIGNALS = (signal.SIGINT, signal.SIGTERM)
FINISH_SECONDS = 15.0  # the longest a signalled step may run on to its end (docs/RELIABILITY.md)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as an interruption so that the run closes what it opened."""


class _State:
    received: int | None = None  # the first signal of the block, once received
    deferring = 0  # depth of deferred() blocks
    finishing = False  # within finishing_step(): a first signal waits for the step's end
    deadline: threading.Timer | None = None  # interrupts a signalled step that runs past FINISH_SECONDS
    previous: dict[
        int, Any
    ] = {}  # the handlers interruptible() replaced (SIGCHLD once stopping), while active


def _restore_in_child() -> None:
    """A forked child (a DataLoader worker) gets the handlers the process had before: its own SIGTERM must end
    it, whatever the parent was deferring as it forked."""
    for number, handler in _State.previous.items():
        signal.signal(number, handler)
    _State.previous, _State.received, _State.deferring = {}, None, 0
    _State.finishing, _State.deadline = False, None


os.register_at_fork(after_in_child=_restore_in_child)


def _interruption(signum: int) -> KeyboardInterrupt:
    return Terminated(f"signal {signum}") if signum == signal.SIGTERM else KeyboardInterrupt()


def _child_ended(signum: int, frame: object) -> None:
    """A child process ended while stopping: expected."""


def _swallowed(hook: Callable[[Any], object]) -> Callable[[Any], object]:
    """`hook`, except once a signal came: an interruption raised where Python ignores exceptions (a `__del__`) is
    recorded and raised again at the next step, and an error there (the finalizer of a DataLoader iterator whose
    workers the same signal ended) belongs to the stop under way, so their "Exception ignored" tracebacks would
    only be noise."""

    def report(unraisable: Any) -> None:
        if _State.received is None:
            hook(unraisable)

    return report


def _handle(signum: int, frame: object) -> None:
    first = _State.received is None
    if first:
        _State.received = signum
        # torch's DataLoader raises from its SIGCHLD handler when a worker dies of a signal, wherever the main
        # thread is (a generator's finalizer too, which prints the error as a traceback). Stopping, a worker's end
        # is expected (the same signal may have reached it): that check is off from then on. (A Python
        # function, not SIG_DFL: a SIGCHLD already pending would then be an OSError, "ignored due to race".)
        _State.previous.setdefault(signal.SIGCHLD, signal.signal(signal.SIGCHLD, _child_ended))
    if _State.deferring:
        return
    if first and _State.finishing:  # the step runs on to its end, for FINISH_SECONDS at most
        # Past the bound the signal comes again, to the main thread, where it also ends a blocking call
        main = threading.main_thread().ident
        _State.deadline = threading.Timer(FINISH_SECONDS, signal.pthread_kill, (main, signum))
        _State.deadline.daemon = True
        _State.deadline.start()
        return
    raise _interruption(signum)


@contextmanager
def interruptible() -> Iterator[None]:
    """Within the block (main thread only), SIGINT and SIGTERM interrupt as described above; outside it, both keep
    their handlers. A block within another (a command's, then its run's) leaves the work to the outer one."""
    if threading.current_thread() is not threading.main_thread() or _State.previous:
        yield
        return
    _State.previous = {number: signal.signal(number, _handle) for number in SIGNALS}
    _State.received = None
    unraisable, sys.unraisablehook = sys.unraisablehook, _swallowed(sys.unraisablehook)
    try:
        yield
    except Exception as error:
        if _State.received is None:
            raise
        # Met while stopping: a DataLoader worker ended by the same signal, sent to the whole process group.
        raise _interruption(_State.received) from error
    finally:
        sys.unraisablehook = unraisable
        for number, handler in _State.previous.items():
            # Once stopping, a worker the same signal ended may report after the block (its iterator still held
            # by the interruption's traceback): torch's SIGCHLD check stays off, the run is over.
            if number != signal.SIGCHLD or _State.received is None:
                signal.signal(number, handler)
        _State.previous, _State.received = {}, None


@contextmanager
def finishing_step() -> Iterator[None]:
    """A step that a first signal lets run on to its end (FINISH_SECONDS at most); ask `stop_requested()` after it."""
    _State.finishing = True
    try:
        yield
    finally:
        _State.finishing = False
        if _State.deadline is not None:
            _State.deadline.cancel()
            _State.deadline = None


def stop_requested() -> bool:
    """Whether a signal came within the `interruptible()` block: the run should stop at this step boundary."""
    return _State.received is not None


def raise_if_stopped() -> None:
    """Raise the interruption of a signal received in an `interruptible()` block, if any (once raised, it is
    raised again here: a stop is never lost)."""
    if _State.received is not None:
        raise _interruption(_State.received)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold off an interruption until the block ends (then raise it)."""
    _State.deferring += 1
    try:
        yield
    finally:
        _State.deferring -= 1
    if not _State.deferring:
        raise_if_stopped()


def leave_at_next_signal(code: int) -> None:
    """From now on, SIGINT and SIGTERM end the process at once with exit `code` (what was printed is flushed;
    the run has already closed what it opened). For the program only, never for a caller that goes on."""
    if threading.current_thread() is not threading.main_thread():
        return

    def leave(signum: int, frame: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):
                stream.flush()
        os._exit(code)

    for number in SIGNALS:
        signal.signal(number, leave)


def skip_final_collection() -> None:
    """At the program's exit, after every other exit handler, leave the interpreter's last garbage collection
    out (`gc.freeze`): with torch imported it walks millions of objects, most of a second between a command's
    last line and its exit, for memory the process returns anyway. What must be closed is closed explicitly
    before then."""
    atexit.register(gc.freeze)  # registered first, so it runs last


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
