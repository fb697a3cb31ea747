"""Exported files served: a `.pt2` program and an ONNX file answer as the PyTorch weights they came from, with the
class names their metadata carries; they draw no rollout (an exported graph has no attention maps)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
import torch

from service.conftest import CLASSES, Served, photo, running
from vitkit.export import export_onnx, export_program
from vitkit.service import ServiceOptions, load_served_model
from vitkit.weights import load_weights

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("suffix", [".pt2", ".onnx"])
def test_an_export_answers_as_its_weights(
    served: Served, weights_dir: Path, tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"tiny{suffix}"
    model = load_weights(weights_dir)
    (export_program if suffix == ".pt2" else export_onnx)(model, path, log=None)
    exported = load_served_model(str(path))
    assert exported.class_names == CLASSES and exported.runtime == (
        "torch.export" if suffix == ".pt2" else "onnxruntime"
    )
    data = photo(40)
    with running(exported, ServiceOptions(max_batch=4)) as server:
        answer = requests.post(
            f"{server.url}/predict",
            data=data,
            headers={"Content-Type": "image/png"},
            params={"rollout": "true"},
            timeout=30,
        ).json()
        info = requests.get(f"{server.url}/info", timeout=30).json()
    reference = requests.post(
        f"{served.url}/predict", data=data, headers={"Content-Type": "image/png"}, timeout=30
    ).json()
    assert [p["class"] for p in answer["predictions"]] == [p["class"] for p in reference["predictions"]]
    torch.testing.assert_close(
        torch.tensor([p["probability"] for p in answer["predictions"]]),
        torch.tensor([p["probability"] for p in reference["predictions"]]),
        atol=1e-5,
        rtol=0,
    )
    assert answer["model"]["name"] == path.name and answer["model"]["precision"] == "fp32"
    assert "rollout" not in answer and info["rollout"] is False


def test_bf16_is_refused_for_an_export(tmp_path: Path) -> None:
    path = tmp_path / "model.pt2"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="runs in float32 as exported"):
        load_served_model(str(path), precision="bf16")
