"""The tiny engine recipe on the embedded Fashion-MNIST subset (tests/tiny.py); every test starts with nothing
measured, in the process or in the cache directory."""

import pytest

from vitkit import precision
from vitkit.cache import CACHE_ENV


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(precision, "_measured", {})
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def _embedded(embedded_data) -> None:
    """Every test here on the embedded subset (tests/tiny.py)."""
