"""The tiny recipe (tests/tiny.py) on the embedded Fashion-MNIST subset, so engine tests take seconds."""

import pytest


@pytest.fixture(autouse=True)
def _embedded(embedded_data) -> None:
    """Every test here on the embedded subset (tests/tiny.py)."""
