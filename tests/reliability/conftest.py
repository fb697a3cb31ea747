"""Every reliability test runs under a deadline (tests/deadline.py) and on the embedded Fashion-MNIST subset."""

import pytest


@pytest.fixture(autouse=True)
def _deadline_and_embedded(deadline, embedded_data) -> None:
    """Every test here under a deadline, on the embedded subset."""
