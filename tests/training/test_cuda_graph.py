"""train.cuda_graph: which runs capture their update as a CUDA graph, the one-line refusal of 'on' where it
cannot, and on a GPU: graphed steps train as eager ones do, and a graphed run resumes bitwise."""

import dataclasses
import json
import shutil

import pytest
import torch

from vitkit import cli
from vitkit.recipe.run_config import TrainSection
from vitkit.storage import load_state_dict
from vitkit.training.build import use_cuda_graph
from vitkit.training.objectives import objective_for
from vitkit.training.report import read_metrics

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def captured(train: TrainSection, device: torch.device, strategy: str) -> bool:
    return use_cuda_graph(train, objective_for(train), device, strategy)


def test_auto_captures_a_one_process_classification_run_on_cuda_only():
    auto = TrainSection()
    assert captured(auto, CUDA, "none")
    assert not captured(auto, CPU, "none")
    assert not captured(auto, CUDA, "ddp")
    assert not captured(dataclasses.replace(auto, objective="mpp"), CUDA, "none")
    assert not captured(dataclasses.replace(auto, cuda_graph="off"), CUDA, "none")
    assert not captured(dataclasses.replace(auto, compile=True), CUDA, "none")  # inductor syncs
    with pytest.raises(ValueError, match="train.compile: inductor"):
        captured(dataclasses.replace(auto, compile=True, cuda_graph="on"), CUDA, "none")


def test_on_refuses_a_run_it_cannot_capture_in_one_line(tmp_path, tiny_recipe, capsys):
    argv = ["train", "--out", str(tmp_path / "run"), "--steps", "4", *tiny_recipe, "train.cuda_graph=on"]
    assert cli.main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "train.cuda_graph='on' cannot capture this run" in error
    assert "the run is on cpu" in error and not (tmp_path / "run").exists()
    assert cli.main([*argv[:-1], "train.cuda_graph=yes"]) == 2
    assert "train.cuda_graph" in capsys.readouterr().err


def train_on_gpu(out, tiny_recipe, *extra) -> dict:
    argv = [
        "train",
        "--out",
        str(out),
        "--steps",
        "12",
        "--checkpoint-every",
        "6",
        *tiny_recipe,
        "train.device=cuda",
    ]
    assert cli.main([*argv, "train.log_every=1", *extra]) == 0
    return json.loads((out / "report.json").read_text())


@needs_cuda
def test_graphed_steps_train_as_eager_steps_do(tmp_path, tiny_recipe):
    micro = "train.micro_batch_size=16"  # two micro-batches a step, inside the graph too
    runs = {
        mode: train_on_gpu(tmp_path / mode, tiny_recipe, micro, f"train.cuda_graph={mode}")
        for mode in ("off", "on")
    }
    losses = {
        mode: [r["train_loss"] for r in read_metrics(tmp_path / mode) if "train_loss" in r] for mode in runs
    }
    assert len(losses["on"]) == 12
    # the same kernels, but the graph's optimizer reads its learning rate from a tensor
    assert losses["on"] == pytest.approx(losses["off"], rel=1e-4)
    assert runs["on"]["test_top1"] == pytest.approx(runs["off"]["test_top1"], abs=0.01)


@needs_cuda
def test_a_graphed_run_with_dropout_mixup_and_ema_resumes_bitwise(tmp_path, tiny_recipe):
    stateful = ["train.cuda_graph=on", "model.dropout=0.1", "data.mixup=0.2", "train.ema_decay=0.99"]
    reference = train_on_gpu(tmp_path / "reference", tiny_recipe, *stateful)
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "reference", killed)
    shutil.rmtree(killed / "checkpoints" / "step_00000012")
    shutil.rmtree(killed / "final")
    (killed / "report.json").unlink()
    assert cli.main(["train", "--out", str(killed), "--resume"]) == 0
    for name in ("final/model.safetensors", "checkpoints/step_00000012/ema.safetensors"):
        a, b = load_state_dict(killed / name), load_state_dict(tmp_path / "reference" / name)
        assert all(torch.equal(a[k], b[k]) for k in b), name
    assert json.loads((killed / "report.json").read_text())["test_top1"] == reference["test_top1"]
