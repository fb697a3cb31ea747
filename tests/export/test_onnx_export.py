"""ONNX exports: onnx.checker, ONNX Runtime against PyTorch at batch sizes 1 and 7, the serving metadata."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import vitkit
from vitkit.data.transforms import eval_transform
from vitkit.export import ExportMismatch, export_onnx, read_onnx_metadata
from vitkit.export.check import compare
from vitkit.export.requirements import MissingDependency
from vitkit.export.staging import staged

from .conftest import KINDS, tiny_model

TOLERANCE = 1e-4


def ort_logits(path: Path, x: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixels": x.numpy()})[0]


def assert_reproduces(model: torch.nn.Module, path: Path) -> float:
    """ONNX Runtime's logits within TOLERANCE of PyTorch's at batch sizes 1 and 7; the largest difference."""
    onnx.checker.check_model(str(path), full_check=True)
    worst = 0.0
    for batch in (1, 7):
        x = torch.rand(batch, *model.config.input_size) * 2 - 1
        with torch.no_grad():
            expected = model(x).numpy()
        worst = max(worst, float(np.abs(ort_logits(path, x) - expected).max()))
    assert worst < TOLERANCE
    return worst


@pytest.fixture(scope="module")
def official_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path, list]:
    """A tiny class-token ViT read from official-layout .npz weights, exported once for the module's tests."""
    directory = tmp_path_factory.mktemp("onnx")
    vitkit.export_npz(tiny_model("token"), directory / "official.npz")
    model = vitkit.load_weights(directory / "official.npz").eval()
    model.class_names = [f"class {i}" for i in range(model.config.num_classes)]
    checks = export_onnx(model, directory / "model.onnx", log=None)
    return model, directory / "model.onnx", checks


def test_official_layout_vit_passes_checker_and_reproduces_pytorch(official_export) -> None:
    model, path, checks = official_export
    assert_reproduces(model, path)
    (check,) = checks
    assert check.batch_sizes == (1, 7) and check.count == 8 and check.max_abs_diff < TOLERANCE


def test_batch_dimension_is_free_and_named(official_export) -> None:
    _, path, _ = official_export
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == ["batch", 3, 16, 16]
    assert session.get_outputs()[0].shape == ["batch", 5]


def test_metadata_describes_the_preprocessing_the_model_was_trained_with(official_export) -> None:
    model, path, _ = official_export
    metadata = read_onnx_metadata(path)
    assert metadata["class_names"] == model.class_names
    assert metadata["input_size"] == [3, 16, 16]
    assert metadata["vitkit_version"] == vitkit.__version__
    # A server that normalises as the metadata says feeds the model what vitkit's preprocessing feeds it.
    pixels = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
    mean = torch.tensor(metadata["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(metadata["std"]).view(1, -1, 1, 1)
    served = (pixels.float() / 255 - mean) / std
    torch.testing.assert_close(served, eval_transform(pixels, (16, 16)), atol=1e-6, rtol=0)
    low, high = metadata["value_range"]
    assert low <= served.min() and served.max() <= high


def test_a_difference_beyond_tolerance_fails_the_check() -> None:
    model = tiny_model("gap")
    with torch.no_grad():
        exact = lambda x: model(torch.from_numpy(x)).numpy()  # noqa: E731
        assert compare(model, exact, "same").max_abs_diff == 0
        off = lambda x: model(torch.from_numpy(x)).numpy() + 2 * TOLERANCE  # noqa: E731
        with pytest.raises(ExportMismatch, match="above the tolerance"):
            compare(model, off, "shifted")


def test_unexportable_models_are_refused_in_one_line(tmp_path: Path) -> None:
    dynamic = vitkit.create_model("ViT-B/16", **dict(KINDS["token"][1], dynamic_img_size=True))
    with pytest.raises(ValueError, match="dynamic_img_size") as error:
        export_onnx(dynamic, tmp_path / "m.onnx", log=None)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="cannot export Linear"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path / "m.onnx", log=None)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_model_kind_exports(kind: str, tmp_path: Path) -> None:
    model = tiny_model(kind)
    (check,) = export_onnx(model, tmp_path / "m.onnx", log=None)
    assert check.max_abs_diff < TOLERANCE
    assert_reproduces(model, tmp_path / "m.onnx")
    assert [f.name for f in tmp_path.iterdir()] == ["m.onnx"]  # no staging directory left


@pytest.mark.slow
def test_int8_export_is_smaller_agrees_on_top1_and_keeps_metadata(tmp_path: Path) -> None:
    model = tiny_model("token")
    fp32, int8 = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    export_onnx(model, fp32, log=None)
    checks = export_onnx(model, int8, int8=True, log=None)
    assert [c.what for c in checks] == ["ONNX Runtime fp32", "ONNX Runtime int8"]
    assert checks[1].tolerance is None and checks[1].max_abs_diff > 0  # quantised: not the fp32 logits
    onnx.checker.check_model(str(int8))
    graph = onnx.load(str(int8)).graph
    assert "MatMulInteger" in {node.op_type for node in graph.node}
    int8_weights = [t for t in graph.initializer if t.data_type == onnx.TensorProto.INT8]
    assert sum(np.prod(t.dims) for t in int8_weights) > 0.5 * sum(p.numel() for p in model.parameters())
    assert int8.stat().st_size < fp32.stat().st_size
    assert read_onnx_metadata(int8)["class_names"] == model.class_names
    x = torch.rand(16, *model.config.input_size) * 2 - 1
    with torch.no_grad():
        expected = model(x).numpy()
    assert (ort_logits(int8, x).argmax(-1) == expected.argmax(-1)).mean() >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ViT-B/16", "R50+ViT-B/16"])
def test_full_size_models_export(name: str, tmp_path: Path) -> None:
    """ViT-B/16 through its official .npz layout, and the hybrid: both at 224, 1000 classes."""
    model = vitkit.create_model(name).eval()
    if name == "ViT-B/16":
        vitkit.export_npz(model, tmp_path / "official.npz")
        model = vitkit.load_weights(tmp_path / "official.npz").eval()
    with torch.no_grad():
        model.head.weight.normal_(std=0.02)  # the official init's zero head would make every logit 0
    (check,) = export_onnx(model, tmp_path / "m.onnx", log=None)
    print(f"{name}: {check.summary()}")
    assert_reproduces(model, tmp_path / "m.onnx")


def test_staging_moves_the_file_and_its_sidecars_or_nothing(tmp_path: Path) -> None:
    with staged(tmp_path / "m.onnx") as target:
        target.write_text("graph")
        target.with_name("m.onnx.data").write_text("weights")
        (target.parent / "scratch").mkdir()  # an intermediate directory is not moved
    assert sorted(f.name for f in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]
    with pytest.raises(RuntimeError, match="check failed"), staged(tmp_path / "n.onnx") as target:
        target.write_text("graph")
        raise RuntimeError("check failed")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


def test_a_missing_serving_package_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # `import onnxscript` now raises ImportError
    with pytest.raises(
        MissingDependency, match=r"onnxscript is not installed.*pip install 'vitkit\[serve\]'"
    ):
        export_onnx(tiny_model("gap"), tmp_path / "m.onnx", log=None)
    assert not list(tmp_path.iterdir())
