"""The pieces of a bounded shutdown, in this process: SIGTERM raised as an interruption, a closing step that hangs
left behind after its time limit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from torch.utils.data import Dataset

from vitkit import shutdown
from vitkit.data.source import ReadOptions
from vitkit.data.workers import loader
from vitkit.shutdown import Terminated, bounded, deferred, interruptible, raise_if_stopped


def test_signals_interrupt_inside_the_block_only_and_are_never_lost() -> None:
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(Terminated), interruptible():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted long before
        except Terminated:
            pass  # swallowed, as Python swallows it in a fork hook or a __del__...
        raise_if_stopped()  # ...and raised again at the next step
    assert {number: signal.getsignal(number) for number in before} == before
    assert issubclass(Terminated, KeyboardInterrupt)  # the command line's "interrupted", exit code 130
    raise_if_stopped()  # outside the block: nothing pending


def test_a_signalled_step_runs_to_its_end_and_the_stop_is_asked_after_it() -> None:
    """The step a signal comes in ends (its work done), then the loop asks and stops there; once asked, the
    interruption is raised at the next step as always."""
    ended = asked = False
    with pytest.raises(KeyboardInterrupt), interruptible():
        with shutdown.finishing_step():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)  # the rest of the step: not interrupted
            ended = True
        asked = shutdown.stop_requested()
        raise_if_stopped()
    assert ended and asked and not shutdown.stop_requested()


def test_a_step_past_the_bound_or_a_second_signal_is_interrupted_at_once(monkeypatch) -> None:
    """Past FINISH_SECONDS the step is interrupted, also in a blocking call (the signal comes again to the main
    thread); a second Ctrl-C interrupts it at once."""
    monkeypatch.setattr(shutdown, "FINISH_SECONDS", 0.5)
    with pytest.raises(Terminated), interruptible(), shutdown.finishing_step():
        sent = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # a step that would not end in time, blocked in a system call
    assert 0.4 < time.monotonic() - sent < 10
    with pytest.raises(KeyboardInterrupt), interruptible(), shutdown.finishing_step():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the first one waits for the step
        sent = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: at once
        time.sleep(30)
    assert time.monotonic() - sent < 0.4


def test_a_block_within_another_leaves_the_outer_one_working() -> None:
    """`vitkit train`: the command's block, then the run's (also called from Python alone)."""
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(Terminated), interruptible():
        with interruptible():
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted long before
    assert {number: signal.getsignal(number) for number in before} == before


def test_an_interruption_python_ignores_prints_nothing_and_is_raised_later(monkeypatch) -> None:
    """Raised in a `__del__`, Python would print it as "Exception ignored" (sys.unraisablehook); it is raised
    at the next step instead."""

    class Signalled:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted long before: by Terminated, which Python ignores here

    reported: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with pytest.raises(Terminated), interruptible():
        Signalled()  # collected at once
        raise_if_stopped()
    assert reported == [] and sys.unraisablehook == reported.append


def test_once_stopping_an_error_python_ignores_prints_nothing(monkeypatch) -> None:
    """A finalizer failing once a signal came (a DataLoader iterator whose workers the same group signal ended)
    prints no "Exception ignored" traceback; before a signal, one is reported as usual."""

    class FailsWhenCollected:
        def __del__(self) -> None:
            raise RuntimeError("DataLoader worker (pid 1) exited unexpectedly")

    reported: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with pytest.raises(Terminated), interruptible():
        FailsWhenCollected()  # collected at once, no signal yet: reported
        assert len(reported) == 1
        with deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            FailsWhenCollected()  # stopping: not reported
    assert len(reported) == 1


def test_an_error_met_while_stopping_is_raised_as_the_interruption() -> None:
    """A DataLoader worker ended by the same SIGTERM (sent to the process group) fails the step the main process
    was in: the run still ends as interrupted, the worker's error kept as the cause."""
    with pytest.raises(Terminated) as stopped, interruptible():
        with deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")
    assert isinstance(stopped.value.__cause__, RuntimeError)
    with pytest.raises(RuntimeError), interruptible():  # without a signal, an error is the error
        raise RuntimeError("a failure")


def test_once_stopping_a_childs_end_raises_nothing() -> None:
    """torch's DataLoader raises from its SIGCHLD handler when a worker dies of a signal, wherever the main thread
    is; once a stop is under way that is expected, during the block and after it, and must not replace the stop
    (nor print from a finalizer)."""

    def worker_failed(signum: int, frame: object) -> None:
        raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")

    outer = signal.signal(signal.SIGCHLD, worker_failed)
    try:
        with pytest.raises(Terminated) as stopped, interruptible():
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                child = os.fork()
                if child == 0:
                    os._exit(0)
                os.waitpid(child, 0)
                time.sleep(0.2)  # its SIGCHLD handled by now
        assert stopped.value.__cause__ is None  # the stop itself, not the worker's error
        child = os.fork()  # a worker the same signal ended, reporting after the block: still nothing raised
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGCHLD, outer)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_data_loader_worker_ends_at_once_on_ctrl_c_and_sigterm(workers) -> None:
    """Their default action: no KeyboardInterrupt that could print a traceback as the worker exits; the main
    process, reached by the same signal, stops the run."""
    batches = loader(SignalsEndIt(), ReadOptions(workers=workers), pin_memory=False)
    assert list(batches) == [workers > 0]  # the main process keeps its own handlers


class SignalsEndIt(Dataset):
    """One item: whether SIGINT and SIGTERM take their default action in the process reading it."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> bool:
        return all(signal.getsignal(number) == signal.SIG_DFL for number in (signal.SIGINT, signal.SIGTERM))


def test_an_interruption_is_held_off_until_the_deferred_block_ends() -> None:
    reached = False
    with pytest.raises(KeyboardInterrupt), interruptible():
        with deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            reached = True
    assert reached


def test_a_closing_step_that_hangs_is_left_after_its_limit(capsys) -> None:
    release = threading.Event()
    start = time.monotonic()
    bounded("a stuck writer", release.wait, seconds=0.2)
    assert time.monotonic() - start < 2
    assert "a stuck writer: not closed after 0.2 s; going on without it" in capsys.readouterr().err
    release.set()
    with pytest.raises(OSError, match="disk"):  # a failure within the limit is the caller's
        bounded("a failing writer", lambda: (_ for _ in ()).throw(OSError("disk")))


def test_a_forked_child_gets_the_handlers_of_before(tmp_path) -> None:
    """A DataLoader worker forked while starts are deferred must still end on SIGTERM."""
    outer = signal.signal(
        signal.SIGTERM, signal.SIG_DFL
    )  # what a command-line process has (pytest-xdist: not)
    read_end, write_end = os.pipe()
    try:
        with interruptible(), deferred():
            child = os.fork()
            if child == 0:  # the fork hooks have run: ready
                try:
                    os.write(write_end, b"1")
                    signal.pause()
                finally:
                    os._exit(0)
    finally:
        signal.signal(signal.SIGTERM, outer)
    assert os.read(read_end, 1) == b"1"
    os.close(read_end)
    os.close(write_end)
    os.kill(child, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while (ended := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if ended[0] == 0:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert ended[0] == child and os.WIFSIGNALED(ended[1]) and os.WTERMSIG(ended[1]) == signal.SIGTERM


CYCLE_WITH_FINALIZER = """
from vitkit import shutdown

class Cycle:
    def __del__(self):
        print("collected at exit", flush=True)

cycle = Cycle()
cycle.me = cycle  # garbage only the final collection would find
del cycle
{skip}
"""


@pytest.mark.parametrize("skip", [False, True], ids=["plain", "skipped"])
def test_the_program_skips_the_final_collection(skip: bool) -> None:
    """The interpreter's last collection (most of a second with torch imported) is left out by a program, after
    its other exit handlers; without it, cyclic garbage is found at exit as usual (the test's own control)."""
    code = CYCLE_WITH_FINALIZER.format(skip="shutdown.skip_final_collection()" if skip else "")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert ("collected at exit" in out.stdout) is not skip
