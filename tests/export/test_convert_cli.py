"""`vitkit convert --to onnx / exported`: the printed check, int8 with its accuracy, one-line refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.cli import main
from vitkit.export import load_program, read_onnx_metadata

from .conftest import tiny_model


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    return tiny_model("gap").save_pretrained(tmp_path / "weights")


@pytest.mark.slow
def test_exported_program_prints_its_check(weights: Path, tmp_path: Path, capsys) -> None:
    dst = tmp_path / "model.pt2"
    assert main(["convert", str(weights), str(dst), "--to", "exported"]) == 0
    out = capsys.readouterr().out
    found = re.search(
        r"check: torch.export program vs PyTorch fp32 at batch sizes 1, 7: largest \|logit difference\| (\S+)",
        out,
    )
    assert found and float(found.group(1)) < 1e-4
    module, metadata = load_program(dst)
    assert metadata["class_names"] == vitkit.load_weights(weights).class_names
    x = torch.rand(3, *metadata["input_size"]) * 2 - 1
    torch.testing.assert_close(module(x), vitkit.load_weights(weights).eval()(x), atol=1e-4, rtol=0)


def test_onnx_options_are_refused_for_other_targets(weights: Path, tmp_path: Path, capsys) -> None:
    assert main(["convert", str(weights), str(tmp_path / "m.pt2"), "--to", "exported", "--int8"]) == 2
    assert "--int8 and --accuracy-on apply to --to onnx" in capsys.readouterr().err
    assert not list(tmp_path.glob("m.pt2*"))


@pytest.mark.slow
def test_int8_onnx_with_accuracy_on_fashion_mnist(tmp_path: Path, capsys, tiny_vit, embedded_data) -> None:
    model = tiny_vit(img_size=28, patch_size=7, in_chans=1, num_classes=10)
    weights = model.save_pretrained(tmp_path / "weights")
    dst = tmp_path / "model.onnx"
    argv = ["convert", str(weights), str(dst), "--to", "onnx", "--int8", "--accuracy-on", "fashion_mnist"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "check: ONNX Runtime fp32 vs PyTorch fp32" in out
        and "check: ONNX Runtime int8 vs PyTorch fp32" in out
    )
    found = re.search(r"PyTorch fp32 (\S+)%, ONNX Runtime int8 (\S+)%", out)
    assert found is not None
    assert read_onnx_metadata(dst)["input_size"] == [1, 28, 28]
