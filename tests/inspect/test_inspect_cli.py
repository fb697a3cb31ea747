"""`vitkit inspect` end to end: images of every mode, skipped files, figures, inspect.json, report.html in Chromium."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.cli import main
from vitkit.storage import save_pretrained

FASHION = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
FIGURES = {
    "fig7_filters.png",
    "fig7_position_similarity.png",
    "fig7_attention_distance.png",
    "fig6_rollout.png",
}


def fashion_images(n: int) -> np.ndarray:
    """The first n Fashion-MNIST test images [n, 28, 28] uint8 (random ones if the data set is absent)."""
    if FASHION.exists():
        with gzip.open(FASHION, "rb") as f:
            raw = f.read(16 + n * 28 * 28)
        return np.frombuffer(raw, np.uint8, offset=16).reshape(n, 28, 28)
    return np.random.default_rng(0).integers(0, 256, (n, 28, 28), dtype=np.uint8)


def write_inputs(root: Path) -> tuple[list[str], dict[str, str]]:
    """PNGs of several modes in root/images (plus one corrupt file) and paths to pass; expected skips."""
    images = root / "images"
    images.mkdir()
    fm = fashion_images(6)
    for i, a in enumerate(fm[:4]):
        Image.fromarray(a, "L").save(images / f"fashion_{i}.png")
    rgb = np.stack([fm[4], 255 - fm[4], fm[4] // 2], -1)
    Image.fromarray(rgb, "RGB").save(images / "rgb.png")
    rgba = np.concatenate([rgb, fm[5][..., None]], -1)
    Image.fromarray(rgba, "RGBA").save(images / "rgba.png")
    Image.fromarray(fm[5].astype(np.uint16) * 257).save(images / "grey16.png")  # 16-bit PNG
    Image.fromarray(rgb, "RGB").convert("P").save(images / "palette.gif")
    try:  # a real photo (JPEG, 427 x 640) when scikit-learn ships one
        from sklearn.datasets import load_sample_image
    except ImportError:
        load_sample_image = None
    if load_sample_image is not None:
        Image.fromarray(load_sample_image("flower.jpg")).save(images / "flower.jpg")
    (images / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    missing = str(root / "missing.png")
    skips = {str(images / "broken.png"): "not an image vitkit can read", missing: "no such file"}
    return [str(images), missing], skips


@pytest.fixture(scope="module")
def inspected(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    torch.manual_seed(0)
    model = vitkit.create_model(
        "ViT-Ti/16",
        img_size=28,
        patch_size=7,
        in_chans=1,
        hidden_size=32,
        depth=3,
        num_heads=4,
        mlp_dim=64,
        num_classes=10,
    )
    save_pretrained(model, root / "final")
    paths, skips = write_inputs(root)
    out = root / "out"
    code = main(
        [
            "inspect",
            "--weights",
            str(root / "final"),
            "--images",
            *paths,
            "--out",
            str(out),
            "--rollout-images",
            "4",
            "--precision",  # the API's, which test_cli_distance_equals_api compares with
            "fp32",
        ]
    )
    return code, out, skips, model


def test_cli_writes_figures_and_json(inspected, capsys):
    code, out, skips, _ = inspected
    assert code == 0
    assert FIGURES <= {p.name for p in out.iterdir()}
    for name in FIGURES:
        with Image.open(out / name) as im:
            assert im.size[0] > 100 and im.size[1] > 100
    summary = json.loads((out / "inspect.json").read_text())
    dist = summary["mean_attention_distance"]
    assert len(dist) == 3 and all(len(row) == 4 for row in dist)
    assert all(0 < d < 28 * 2**0.5 for row in dist for d in row)
    assert summary["config"]["patch_size"] == [7, 7] and summary["input_stride"] == 7
    assert summary["grid_size"] == [4, 4]
    used = [Path(n).name for n in summary["images"]]
    assert {"fashion_0.png", "rgb.png", "rgba.png", "grey16.png", "palette.gif"} <= set(used)
    assert summary["num_images"] == len(used)
    skipped = {s["path"]: s["reason"] for s in summary["skipped"]}
    for path, reason in skips.items():
        assert reason in skipped[path]
    assert summary["position_embedding"]["applicable"] is True
    assert len(summary["filter_components"]["explained_variance_ratio"]) == 28
    assert (summary["device"], summary["precision"], summary["precision_reason"]) == (
        "cpu",
        "fp32",
        "asked for",
    )


def test_cli_distance_equals_api(inspected):
    """The JSON numbers are the API's on the same preprocessed images."""
    _, out, _, model = inspected
    from vitkit.inspect.images import preprocess, read_images

    summary = json.loads((out / "inspect.json").read_text())
    images, names, _ = read_images(summary["images"])
    x = preprocess(images, (28, 28), 1)
    assert x.shape == (len(names), 1, 28, 28) and x.min() >= -1 and x.max() <= 1
    maps = vitkit.inspect.attention_maps(model, x)
    expected = vitkit.inspect.mean_attention_distance(maps, (4, 4), 7, 1)
    np.testing.assert_allclose(summary["mean_attention_distance"], expected.numpy(), atol=1e-3)


def test_cli_errors_are_one_line(tmp_path, capsys, tiny_vit):
    model = tiny_vit(patch_size=8, num_classes=2, classifier="gap", pos_embed="none")
    save_pretrained(model, tmp_path / "w")
    (tmp_path / "bad.png").write_bytes(b"nope")
    code = main(
        [
            "inspect",
            "--weights",
            str(tmp_path / "w"),
            "--images",
            str(tmp_path / "bad.png"),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert code == 2
    assert "no readable image" in capsys.readouterr().err


def test_cli_gap_model_without_position_embedding(tmp_path, tiny_vit):
    model = tiny_vit(patch_size=8, num_classes=2, classifier="gap", pos_embed="none")
    save_pretrained(model, tmp_path / "w")
    for i, image in enumerate(fashion_images(2)):
        Image.fromarray(image).save(tmp_path / f"{i}.png")
    args = ["inspect", "--weights", str(tmp_path / "w"), "--images", str(tmp_path / "0.png")]
    args += [str(tmp_path / "1.png"), "--out", str(tmp_path / "o"), "--max-images", "1"]
    assert main(args) == 0
    summary = json.loads((tmp_path / "o" / "inspect.json").read_text())
    assert summary["num_images"] == 1 and summary["images"] == [str(tmp_path / "0.png")]
    assert summary["position_embedding"]["applicable"] is False
    assert "not applicable" in summary["position_embedding"]["note"]
    assert len(summary["mean_attention_distance"]) == 2
    assert not (tmp_path / "o" / "fig7_position_similarity.png").exists()
    assert "not applicable" in (tmp_path / "o" / "report.html").read_text()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)"
)
def test_report_renders_in_headless_chromium(inspected, tmp_path):
    _, out, _, _ = inspected
    report = out / "report.html"
    text = report.read_text()
    assert re.search(r"src=['\"](?!data:)", text) is None  # self-contained: no external resource
    assert text.count("<img ") == len(FIGURES)
    flags = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--virtual-time-budget=5000",
        "--hide-scrollbars",
    ]
    dom = subprocess.run(
        [*flags, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=60, check=False
    )
    assert f'data-images-loaded="{len(FIGURES)}/{len(FIGURES)}"' in dom.stdout, dom.stderr[-2000:]
    shot = tmp_path / "report.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1100,2400", report.as_uri()],
        capture_output=True,
        timeout=60,
        check=False,
    )
    with Image.open(shot) as im:
        pixels = np.asarray(im.convert("RGB"))
    assert pixels.shape[:2] == (2400, 1100)
    assert pixels.std() > 10  # something was drawn
