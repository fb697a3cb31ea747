"""Ctrl-C in a command's first seconds, while it imports torch (seconds on a loaded machine), ends it with one
line, `vitkit COMMAND: interrupted`, and exit status 130, as later; a command that finished first is left alone.
The moments are counted from the one the process maps libtorch (the middle of `import torch`), so each falls
after the interpreter's own start-up, whatever the load."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny import TINY_RECIPE

START_SECONDS = 60  # to reach the import of torch, on a loaded machine


def importing_torch(pid: int) -> bool:
    try:
        return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # gone, or not yet readable
        return False


def shell_status(returncode: int) -> int:
    """The exit status a shell reports (128 + N for a process ended by signal N). CPython ends itself by SIGINT
    after a KeyboardInterrupt went through code that a C extension ran (part of torch's import), even one vitkit
    caught; a shell sees 130 either way."""
    return 128 - returncode if returncode < 0 else returncode


def interrupt(command: list[str], after: float, tmp_path: Path) -> tuple[int, str]:
    """Start `vitkit COMMAND`, send it SIGINT `after` seconds into its import of torch; (exit status as a shell
    reports it, stderr)."""
    process = subprocess.Popen([sys.executable, "-m", "vitkit.cli", *command], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + START_SECONDS
        while not importing_torch(process.pid) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert process.poll() is None, f"{command} ended before importing torch"
        time.sleep(after)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=START_SECONDS)
        return shell_status(process.returncode), err
    finally:
        process.kill()
        process.wait()


def check(command: list[str], moments: list[float], tmp_path: Path) -> None:
    """At the first moment the command is importing torch: interrupted. Later ones may find it done (exit 0).
    Each moment starts in a directory of its own: a run interrupted once under way holds its `--out`."""
    for after in moments:
        directory = tmp_path / f"at_{after}s"
        directory.mkdir()
        status, err = interrupt(command, after, directory)
        line = f"vitkit {command[0]}: interrupted\n"
        # a run once under way says how to go on
        interrupted = {(130, line), (130, f"to continue: vitkit {command[0]} --out run --resume\n{line}")}
        # A run that had finished may take the signal in the interpreter's teardown, after vitkit's handlers.
        finished = (directory / "run" / "report.json").is_file() and (status, err) in ((0, ""), (130, ""))
        assert (
            (status, err) in interrupted or (after > 0 and status == 0 and "Traceback" not in err) or finished
        ), f"SIGINT {after} s into importing torch: exit status {status}, stderr {err!r}"


def test_ctrl_c_while_importing_torch_is_one_line(tmp_path: Path) -> None:
    check(["models"], [0.0], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["models"], ["train", "--out", "run", "--steps", "50", *TINY_RECIPE]],
    ids=["models", "train"],
)
def test_ctrl_c_at_every_early_moment_is_one_line(command: list[str], tmp_path: Path) -> None:
    check(command, [0.0, 0.1, 0.3, 0.6, 1.0, 1.5, 2.5, 4.0], tmp_path)
