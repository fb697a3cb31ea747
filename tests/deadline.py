"""A test under a deadline (SIGALRM), so that a read that blocks fails the test instead of hanging the suite: a
plugin of the root conftest.py, which the test packages that read from sockets and processes request for every
test (their conftest.py)."""

import signal

import pytest

DEADLINE_SECONDS = 120
SLOW_DEADLINE_SECONDS = 3600  # the slow tests start tens of training processes


class Deadline(Exception):
    """A test ran past its deadline: something blocked."""


@pytest.fixture
def deadline(request):
    seconds = SLOW_DEADLINE_SECONDS if request.node.get_closest_marker("slow") else DEADLINE_SECONDS

    def expire(signum, frame):
        raise Deadline(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
