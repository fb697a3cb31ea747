"""The embedded Fashion-MNIST subset whatever is installed (torch's thread count is restored after each test by
tests/tiny.py)."""

import pytest


@pytest.fixture(autouse=True)
def _embedded(embedded_data) -> None:
    """Every test here on the embedded subset (tests/tiny.py)."""
