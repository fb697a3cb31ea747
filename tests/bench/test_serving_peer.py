"""The hand-written FastAPI + timm server that benchmarks/serving_load.py --peer measures `vitkit serve` against
answers real requests: concurrent images batched together, each with the top-5 classes of timm's own model."""

import concurrent.futures
import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
import timm
import torch
from PIL import Image
from torchvision import transforms

PEER = Path(__file__).resolve().parents[2] / "benchmarks" / "peers" / "fastapi_timm_serve.py"


def jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(240, 320, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def probabilities(model: torch.nn.Module, body: bytes) -> torch.Tensor:
    """timm's class probabilities for an encoded image, preprocessed as the peer does (resize, centre crop, [-1, 1])."""
    transform = transforms.Compose([transforms.Resize(224), transforms.CenterCrop(224), transforms.ToTensor(),
                                    transforms.Normalize([0.5] * 3, [0.5] * 3)])  # fmt: skip
    with torch.no_grad(), Image.open(io.BytesIO(body)) as image:
        return model(transform(image.convert("RGB"))[None])[0].softmax(-1)


@pytest.mark.slow  # a timm model in a server process: ~10 s
def test_the_peer_server_batches_requests_and_answers_timm_s_classes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    torch.save(model.state_dict(), tmp_path / "tiny.pth")
    command = [sys.executable, str(PEER), "--model", "vit_tiny_patch16_224", "--weights", str(tmp_path / "tiny.pth"),
               "--port", "0", "--max-wait-ms", "200"]  # fmt: skip
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        lines = iter(process.stderr.readline, "")  # the address, maybe after a library's warnings
        url = next((found for line in lines if (found := re.search(r"http://[\d.]+:\d+", line))), None)
        assert url, "the peer printed no address"
        images = [jpeg(i) for i in range(4)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(lambda body: requests.post(f"{url.group()}/predict", data=body, timeout=60), images)
            )
        assert all(a.status_code == 200 for a in answers)
        metrics = requests.get(f"{url.group()}/metrics", timeout=10).json()
        assert metrics["images_predicted"] == 4 and metrics["batches"] < 4  # some shared a forward pass
        for body, answer in zip(images, answers, strict=True):
            top = answer.json()["predictions"]
            expected = probabilities(model, body)  # float32; the peer computes in bf16
            assert len(top) == 5
            assert all(abs(p["probability"] - expected[p["index"]]) < 0.02 for p in top)
            assert expected[top[0]["index"]] >= expected.max() - 0.02
    finally:
        process.kill()
        process.wait()
