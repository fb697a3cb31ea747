"""Every test process keeps vitkit's cache (downloads, shard indexes, precision choices) in a fresh directory, so
no test reads what an earlier run, or the user, left in ~/.cache/vitkit; `measuring_precision` makes `auto`
measure afresh. The fixtures of the tiny model and run (tests/tiny.py), of the photo run (tests/photo_run.py) and
the deadline (tests/deadline.py) serve every test package."""

import pytest

from vitkit import precision
from vitkit.cache import CACHE_ENV

pytest_plugins = ["tiny", "photo_run", "deadline"]


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("vitkit-cache")))
        yield


@pytest.fixture
def measuring_precision(monkeypatch, tmp_path):
    """`auto` measures bf16 against fp32 on any CPU, as on one with native bf16 units, with nothing measured
    before and no rule instead (a small model, a short run)."""
    monkeypatch.setattr(precision, "native_bf16_units", lambda: ["avx512_bf16"])
    monkeypatch.setattr(precision, "unmeasured_rule", lambda *args: None)
    monkeypatch.setattr(precision, "_measured", {})
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "measured"))
