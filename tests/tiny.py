"""The tiny model and the tiny training run that tests share: one definition of each.

- A tiny model: `TINY_VIT_CONFIG` (the config fields), `build_tiny_vit` (the model, for module-scoped fixtures and
  helpers) and the `tiny_vit` fixture (the same factory); `build_tiny_official_vit`, the same ViT in the shape of
  an official ViT-B/16 .npz file.
- A tiny run: `TINY_RECIPE`, the command-line overrides of a ~20k-parameter ViT trained on 28x28 grey images in
  32-image batches, and the `tiny_recipe` fixture (the same, as a tuple).

The root conftest.py loads this module as a plugin (`pytest_plugins`), so its fixtures serve every test package;
test modules import its constants (tests/ is on pytest's pythonpath).
"""

from collections.abc import Callable

import pytest
import torch

import vitkit
from vitkit.models.registry import Model

# 16 px RGB in 4x4 patches, width 32, 2 layers of 2 heads, 3 classes: a 15k-parameter ViT
TINY_VIT_CONFIG = dict(
    img_size=16, patch_size=4, hidden_size=32, depth=2, num_heads=2, mlp_dim=32, num_classes=3
)

# Wider, with 3 heads on a 4x4 grid of 8-pixel patches: for tests of attention, position embeddings and timing
# that need more than one head and more than a few tokens.
TINY_VIT_GRID_CONFIG = dict(
    img_size=32, patch_size=8, hidden_size=48, depth=2, num_heads=3, mlp_dim=96, num_classes=10
)

TINY_RECIPE = [
    "model.hidden_size=32",
    "model.depth=2",
    "model.num_heads=2",
    "model.mlp_dim=64",
    "model.patch_size=7",
    "model.img_size=28",  # 28x28 grey whatever the data: folder sources default to 224 px RGB
    "model.in_chans=1",
    "model.classifier=gap",
    "optim.warmup_steps=3",
    "train.batch_size=32",
    "train.log_every=10",
    "train.threads=1",
    "train.device=cpu",  # bitwise comparisons of CPU runs, also on machines with a GPU
    # and of runs with evaluations: on a CPU with native bf16 `auto` measures, and may choose either precision
    # (tests/precision covers that choice)
    "train.precision=fp32",
]


def build_tiny_vit(base: str = "ViT-Ti/16", **overrides) -> Model:
    """The tiny ViT in eval mode, the same weights at every call: `base` is the registry entry whose other fields
    (activation, layer norm epsilon, ...) it keeps; keyword arguments change any config field."""
    torch.manual_seed(0)
    return vitkit.create_model(base, **{**TINY_VIT_CONFIG, **overrides}).eval()


def build_tiny_official_vit(**overrides) -> Model:
    """The tiny ViT as a ViT-B/16 in layout and patch size (16x16 patches on 32 px, the tanh GELU of the official
    .npz files), a few thousand times smaller: what commands and examples load as they would the real file."""
    official = dict(
        img_size=32, patch_size=16, depth=2, mlp_dim=64, activation="gelu_tanh"
    )  # 2: photos_last_blocks tunes 2
    return build_tiny_vit("ViT-B/16", **{**official, **overrides})


@pytest.fixture
def tiny_vit() -> Callable[..., Model]:
    """A factory of tiny ViTs (`build_tiny_vit`)."""
    return build_tiny_vit


@pytest.fixture(scope="session")
def tiny_recipe() -> tuple[str, ...]:
    """The overrides of a tiny run (`TINY_RECIPE`)."""
    return tuple(TINY_RECIPE)


@pytest.fixture
def embedded_data(monkeypatch) -> None:
    """The 4000/1000 Fashion-MNIST subset shipped with vitkit, whatever is installed on the machine: the test
    packages that train request it for every test (their conftest.py)."""
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")


@pytest.fixture(autouse=True)
def restore_threads():
    """train.threads changes torch's global thread count; give the rest of the suite its own back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
