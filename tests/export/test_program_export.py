"""torch.export programs (.pt2): read back without vitkit, same logits at batch sizes 1 and 7, metadata inside."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vitkit
from vitkit.export import ExportMismatch, export_program, load_program

from .conftest import KINDS, tiny_model

TOLERANCE = 1e-4


def assert_reproduces(model: torch.nn.Module, path: Path) -> None:
    program = torch.export.load(path).module()  # plain torch: no vitkit code involved
    for batch in (1, 7):
        x = torch.rand(batch, *model.config.input_size) * 2 - 1
        with torch.no_grad():
            torch.testing.assert_close(program(x), model(x), atol=TOLERANCE, rtol=0)


def test_program_reproduces_the_model_and_carries_metadata(tmp_path: Path) -> None:
    model = tiny_model("relative")
    check = export_program(model, tmp_path / "m.pt2", log=None)
    assert check.max_abs_diff < TOLERANCE and check.batch_sizes == (1, 7)
    assert_reproduces(model, tmp_path / "m.pt2")
    _, metadata = load_program(tmp_path / "m.pt2")
    assert metadata["class_names"] == model.class_names
    assert metadata["input_size"] == list(model.config.input_size)


def test_a_failed_check_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(ExportMismatch, match="nothing written"):
        export_program(tiny_model("gap"), tmp_path / "m.pt2", tolerance=-1.0, log=None)
    assert not list(tmp_path.iterdir())


def test_a_file_without_vitkit_metadata_is_refused(tmp_path: Path) -> None:
    model = tiny_model("gap")
    program = torch.export.export(model, (torch.zeros(2, *model.config.input_size),))
    torch.export.save(program, tmp_path / "plain.pt2")
    with pytest.raises(ValueError, match="no vitkit.json inside"):
        load_program(tmp_path / "plain.pt2")
    (tmp_path / "junk.pt2").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable torch.export program"):
        load_program(tmp_path / "junk.pt2")


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_model_kind_exports(kind: str, tmp_path: Path) -> None:
    model = tiny_model(kind)
    export_program(model, tmp_path / "m.pt2", log=None)
    assert_reproduces(model, tmp_path / "m.pt2")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ViT-B/16"])  # the full-size hybrid: test_onnx_export.py (torch.export too)
def test_full_size_models_export(name: str, tmp_path: Path) -> None:
    model = vitkit.create_model(name).eval()
    with torch.no_grad():
        model.head.weight.normal_(std=0.02)
    check = export_program(model, tmp_path / "m.pt2", log=None)
    print(f"{name}: {check.summary()}")
    assert_reproduces(model, tmp_path / "m.pt2")
