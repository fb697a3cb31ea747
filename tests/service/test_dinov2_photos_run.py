"""From DINOv2 weights on the Hugging Face Hub to a served classifier of a folder of photos, offline: `vitkit
finetune --weights hf-hub:timm/vit_base_patch14_reg4_dinov2.lvd142m --config photos_linear` writes a run whose
`vitkit predict`, `vitkit serve` and ONNX export name the folder's classes and give the same answers, each
normalising pixels as the weights expect (ImageNet's mean and std) and pooling as DINOv2 does (token_gap)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import requests
import torch

from hub_cache import timm_upload
from image_collections import write_folder
from service.conftest import running
from vitkit import cli
from vitkit.data.decode import decode_image
from vitkit.export.onnx_export import read_onnx_metadata, runner
from vitkit.models.registry import IMAGENET_MEAN, IMAGENET_STD
from vitkit.service import ServiceOptions, load_served_model

timm = pytest.importorskip("timm")
pytest.importorskip("huggingface_hub")
pytest.importorskip("onnxruntime")
REPO = "timm/vit_base_patch14_reg4_dinov2.lvd142m"


@pytest.mark.slow
def test_a_dinov2_hub_run_predicts_serves_and_exports_the_same_answers(tmp_path: Path, monkeypatch, capsys):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)  # random weights, 2 blocks, at 56 px, under the real hub id and config.json layout
    dinov2 = timm.create_model(
        "vit_base_patch14_reg4_dinov2", img_size=56, depth=2, embed_dim=48, num_heads=3
    )
    timm_upload(tmp_path / "hub", REPO, dinov2.eval(), num_heads=3)
    photos = write_folder(tmp_path / "photos")
    run = tmp_path / "run"
    argv = [
        "finetune",
        "--weights",
        f"hf-hub:{REPO}",
        "--config",
        "photos_linear",
        f"data.source=folder:{photos}",
    ]
    assert cli.main([*argv, "model.img_size=56", "train.precision=fp32", "--quiet", "--out", str(run)]) == 0
    classes = sorted(p.name for p in (photos / "train").iterdir())
    config = json.loads((run / "final" / "config.json").read_text())
    assert config["classifier"] == "token_gap" and config["image_mean"] == list(IMAGENET_MEAN)

    image = next((photos / "test").glob("*/*.png"))
    output = tmp_path / "predicted.jsonl"
    predict = ["predict", str(image), "--weights", str(run), "--precision", "fp32", "--device", "cpu"]
    assert cli.main([*predict, "--topk", str(len(classes)), "--output", str(output)]) == 0
    predicted = json.loads(output.read_text())
    by_predict = dict(zip(predicted["classes"], predicted["probs"], strict=True))

    served = load_served_model(str(run), device="cpu", precision="fp32")
    with running(served, ServiceOptions(max_batch=1, max_wait_ms=0, max_upload_bytes=2**20)) as server:
        answer = requests.post(
            f"{server.url}/predict",
            data=image.read_bytes(),
            headers={"Content-Type": "image/png"},
            params={"top": len(classes)},
            timeout=60,
        ).json()
    by_serve = {p["class"]: p["probability"] for p in answer["predictions"]}

    onnx = tmp_path / "run.onnx"
    assert cli.main(["convert", str(run), str(onnx), "--to", "onnx"]) == 0
    metadata = read_onnx_metadata(onnx)  # preprocessed as a server that knows only the file would
    assert metadata["class_names"] == classes and metadata["mean"] == list(IMAGENET_MEAN)
    channels, height, width = metadata["input_size"]
    pixels = decode_image(str(image))[None].float()
    pixels = torch.nn.functional.interpolate(pixels, (height, width), mode="bilinear", antialias=True)
    mean, std = (torch.tensor(metadata[k]).view(1, -1, 1, 1) for k in ("mean", "std"))
    logits = runner(onnx)(((pixels / 255 - mean) / std).numpy())
    by_onnx = dict(zip(classes, torch.from_numpy(logits).softmax(-1)[0].tolist(), strict=True))

    assert set(by_predict) == set(by_serve) == set(by_onnx) == set(classes)
    top = max(by_predict, key=by_predict.__getitem__)
    assert max(by_serve, key=by_serve.__getitem__) == top == max(by_onnx, key=by_onnx.__getitem__)
    for other in (by_serve, by_onnx):
        np.testing.assert_allclose([other[c] for c in classes], [by_predict[c] for c in classes], atol=1e-4)
    assert max(by_predict.values()) - min(by_predict.values()) > 0.01  # a fitted head, not a uniform answer
    assert tuple(metadata["std"]) == IMAGENET_STD
