"""Every test process keeps vitkit's cache (downloads, shard indexes, precision choices) in a fresh directory, so
no test reads what an earlier run, or the user, left in ~/.cache/vitkit; the fixtures of the tiny model and run
(tests/tiny.py), of the photo run (tests/photo_run.py) and the deadline (tests/deadline.py) serve every test
package."""

import pytest

from vitkit.cache import CACHE_ENV

pytest_plugins = ["tiny", "photo_run", "deadline"]


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("vitkit-cache")))
        yield
