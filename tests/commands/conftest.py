"""Every command test on the embedded Fashion-MNIST subset (tests/tiny.py)."""

import pytest


@pytest.fixture(autouse=True)
def _embedded(embedded_data) -> None:
    """Every test here on the embedded subset (tests/tiny.py)."""
