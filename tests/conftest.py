"""Every test process keeps vitkit's cache (downloads, shard indexes, precision choices) in a fresh directory, so
no test reads what an earlier run, or the user, left in ~/.cache/vitkit; and the tiny ViT that unit tests build."""

from collections.abc import Callable

import pytest
import torch

import vitkit
from tiny_models import TINY_VIT
from vitkit.cache import CACHE_ENV
from vitkit.models.registry import Model


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("vitkit-cache")))
        yield


@pytest.fixture
def tiny_vit() -> Callable[..., Model]:
    """A factory of small ViTs, the same weights at every call: 16 px RGB in 4x4 patches, width 32, 2 layers of
    2 heads, 3 classes, in eval mode; keyword arguments change any config field."""

    def build(**overrides) -> Model:
        torch.manual_seed(0)
        return vitkit.create_model("ViT-Ti/16", **{**TINY_VIT, **overrides}).eval()

    return build
