"""A ~20k-parameter ViT recipe on the embedded Fashion-MNIST subset: the engine and distributed tests' shared run.

Imported by their conftest.py files (tests/ is on pytest's pythonpath), so the recipe and fixtures live once.
"""

import pytest
import torch

TINY = [
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


@pytest.fixture(scope="session")
def tiny() -> tuple[str, ...]:
    """Overrides for a ~20k-parameter ViT on 32-image batches."""
    return tuple(TINY)


@pytest.fixture(autouse=True)
def embedded_data(monkeypatch):
    """The 4000/1000 subset shipped with vitkit, whatever is installed on the machine."""
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")


@pytest.fixture(autouse=True)
def restore_threads():
    """train.threads changes torch's global thread count; give the rest of the suite its own back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
