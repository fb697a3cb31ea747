"""`vitkit bench train`'s candidates run the engine's own step: in this process, and in N processes as
`train.processes = N` runs it. Functional only -- nothing here asserts a speed."""

import pytest

from vitkit.bench import training

TINY_RECIPE = """
[model]
name = "ViT-Ti/16"
img_size = 28
patch_size = 7
in_chans = 1
hidden_size = 32
depth = 2
num_heads = 2
mlp_dim = 64
dropout = 0.0
drop_path = 0.0

[optim]
warmup_steps = 3

[train]
steps = 30
batch_size = 32
"""


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")  # inherited by the spawned workers
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_RECIPE)
    return str(path)


def test_engine_in_two_processes_trains_like_the_engine_in_one(recipe):
    setup = (None, None, recipe)
    config, dataset, model, transform, _ = training._setup(*setup)
    one_process = training.engine_step(config, dataset, model, transform, compile=False)
    expected = [one_process() for _ in range(4)]
    workers = training.EngineProcesses(2, threads=1, steps=1, setup=setup, compile=False)
    try:
        losses = [workers() for _ in range(4)]
    finally:
        workers.close()
    assert losses == pytest.approx(expected, rel=1e-5)
    assert expected[-1] < expected[0]  # it trains


def test_processes_need_the_wall_clock(recipe):
    with pytest.raises(ValueError, match="wall"):
        training.training_vs_timm(recipe=recipe, rounds=1, steps=1, clock="cpu", processes=2)
