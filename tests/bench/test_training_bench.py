"""`vitkit bench train`'s candidates: the engine's own step and the plain timm loop, each in processes of its own
(N of them as `train.processes = N` runs the engine). Functional only -- nothing here asserts a speed."""

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


@pytest.mark.slow
def test_engine_in_two_processes_trains_like_the_engine_in_one(recipe):
    setup = (None, recipe)
    one_process = training.engine_step(training.Workload.load(*setup), compile=False)
    expected = [one_process() for _ in range(4)]
    workers = training.StepProcesses(2, threads=1, steps=1, build=(training.engine_in_worker, setup, False))
    try:
        losses = [workers() for _ in range(4)]
    finally:
        workers.close()
    assert losses == pytest.approx(expected, rel=1e-5)
    assert expected[-1] < expected[0]  # it trains


@pytest.mark.slow
def test_every_candidate_runs_in_its_own_processes_and_is_reported(recipe):
    rows = training.training_vs_timm(recipe=recipe, rounds=1, steps=1)  # N processes: the test above
    names = [row["implementation"] for row in rows]
    threads = training.torch.get_num_threads()
    assert names == [
        "timm, plain loop (same data)",
        "timm, plain loop (same data, freed memory kept)",
        "timm, plain loop (DataLoader)",
        "timm, plain loop (DataLoader, freed memory kept)",
        f"vitkit engine (1 process x {threads} threads)",
        "GEMM 2048^3 (ceiling)",
    ]
    # One round: every ratio is the row's images/s over the named timm loop's, MFU its GFLOP/s over the GEMM's.
    speed = {row["implementation"]: row["images/s"] for row in rows[:-1]}
    gemm = rows[-1]["GFLOP/s"]
    for row in rows[:-1]:
        assert row["images/s"] > 0 and row["MFU"] == pytest.approx(row["GFLOP/s"] / gemm, rel=1e-9)
        for peer in (
            "same data",
            "same data, freed memory kept",
            "DataLoader",
            "DataLoader, freed memory kept",
        ):
            expected = row["images/s"] / speed[f"timm, plain loop ({peer})"]
            assert row[f"vs timm ({peer})"] == pytest.approx(expected, rel=1e-9), (
                row["implementation"],
                peer,
            )


def test_bench_train_has_no_cpu_clock(capsys):
    from vitkit import cli

    with pytest.raises(SystemExit) as exit:
        cli.main(["bench", "train", "--clock", "cpu", "--quiet"])
    assert exit.value.code == 2
    assert "unrecognized arguments: --clock cpu" in capsys.readouterr().err


def test_each_benchmark_has_a_parser_of_its_own(capsys):
    from vitkit import cli

    with pytest.raises(SystemExit):
        cli.main(["bench", "inference", "--help"])
    options = capsys.readouterr().out
    assert "--peers" in options and "--processes" not in options and "--sizes" not in options
    with pytest.raises(SystemExit):
        cli.main(["bench", "batch", "--peers", "timm"])
    assert "unrecognized arguments: --peers timm" in capsys.readouterr().err
