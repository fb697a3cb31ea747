"""A command's output line by line, each line with the seconds since the command started: for the tests that a
long command is never silent for long (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import vitkit


def timestamped_output(
    script: str, argv: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None
) -> list[tuple[float, str]]:
    """Run `python -c script argv...` unbuffered in `cwd`; its stdout and stderr as (seconds, line) as the lines
    arrive (a carriage return ends a line too, as a progress bar redraws). The command must exit 0."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", script, *argv],
        cwd=cwd,
        env={
            **os.environ,
            "PYTHONPATH": str(Path(vitkit.__file__).parents[1]),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    stamped = [(time.perf_counter() - start, line.rstrip()) for line in process.stdout]
    assert process.wait(timeout=timeout) == 0, stamped
    return stamped
