"""Strategy choice and the process-group helpers in one process (no torchrun)."""

import pytest

from tiny import build_tiny_vit
from vitkit import collectives
from vitkit.recipe.resolve import apply_overrides
from vitkit.recipe.run_config import RunConfig
from vitkit.training import distributed


def test_one_process_trains_the_plain_model_whatever_the_strategy():
    assert [distributed.resolve_strategy(s, 1) for s in ("auto", "ddp", "fsdp")] == ["none"] * 3
    assert [distributed.resolve_strategy(s, 2) for s in ("auto", "ddp", "fsdp")] == ["ddp", "ddp", "fsdp"]
    with pytest.raises(ValueError, match="train.strategy"):
        distributed.resolve_strategy("zero3", 2)


def test_the_recipe_checks_the_strategy():
    with pytest.raises(ValueError, match="train.strategy"):
        apply_overrides(RunConfig(), ["train.strategy=zero3"]).validate()
    with pytest.raises(ValueError, match="ema_decay"):
        apply_overrides(RunConfig(), ["train.strategy=fsdp", "train.ema_decay=0.99"]).validate()


def test_without_torchrun_the_helpers_are_the_identity(monkeypatch):
    import torch

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with distributed.process_group(torch.device("cpu")):
        assert collectives.world() == (0, 1)
        assert collectives.broadcast_object({"a": 1}) == {"a": 1}
        collectives.barrier()
    assert distributed.backend_for(torch.device("cpu")) == "gloo"
    assert distributed.backend_for(torch.device("cuda", 0)) == "nccl"


def test_more_cuda_processes_than_gpus_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    import torch

    from vitkit import cli

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    code = cli.main(["train", "--out", str(tmp_path / "run"), "train.device=cuda", "train.processes=2"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert "2 processes on CUDA need one GPU each, but 1 visible" in error and "train.device=cpu" in error
    assert not (tmp_path / "run").exists()
    # a worker started by torchrun on such a machine says the same before touching the GPU
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match="2 processes on CUDA need one GPU each, but 1 visible"):
        distributed.local_device(torch.device("cuda"))


def test_fsdp_shards_on_the_run_device_even_where_a_gpu_is_the_accelerator(monkeypatch):
    """FSDP's default mesh is on the machine's accelerator: a train.device=cpu run on a GPU machine must stay on CPU."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"))  # as on a GPU machine
    monkeypatch.setenv("WORLD_SIZE", "1")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = build_tiny_vit().train()
        distributed.shard_model(model, torch.device("cpu"))
        weight = next(model.parameters())
        assert (
            isinstance(weight, DTensor)
            and weight.device_mesh.device_type == "cpu"
            and weight.device.type == "cpu"
        )
        model(torch.randn(2, 3, 16, 16)).sum().backward()
    finally:
        dist.destroy_process_group()
