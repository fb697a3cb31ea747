"""Every reliability test runs under a deadline (SIGALRM), so a read that blocks fails the test instead of hanging
the suite; the tiny recipe's fixtures."""

from __future__ import annotations

import signal

import pytest

from tiny_run import embedded_data, restore_threads, tiny  # noqa: F401  (fixtures)

DEADLINE_SECONDS = 120


class Deadline(Exception):
    """A test ran past DEADLINE_SECONDS: something blocked."""


@pytest.fixture(autouse=True)
def deadline():
    def expire(signum, frame):
        raise Deadline(f"no answer within {DEADLINE_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(DEADLINE_SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
