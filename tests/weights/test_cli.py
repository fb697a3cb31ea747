"""`vitkit convert` and `vitkit predict`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.cli import main
from vitkit.data.decode import decode_image
from vitkit.weights.official import read_npz

from .conftest import DATA, max_abs, nchw, official_io


def test_convert_npz_vitkit_npz_is_bitwise(tmp_path: Path) -> None:
    assert main(["convert", str(DATA / "D_params_prelinen.npz"), str(tmp_path / "d"), "--to", "vitkit"]) == 0
    assert (
        main(["convert", str(tmp_path / "d"), str(tmp_path / "d.npz"), "--to", "npz", "--layout", "legacy"])
        == 0
    )
    original, written = read_npz(DATA / "D_params_prelinen.npz"), read_npz(tmp_path / "d.npz")
    assert sorted(original) == sorted(written)
    assert all(np.array_equal(original[k], written[k]) for k in original)


@pytest.mark.parametrize(("target", "dst"), [("timm", "a.safetensors"), ("timm", "a.pth"), ("hf", "a_hf")])
def test_convert_official_to_libraries(target: str, dst: str, tmp_path: Path) -> None:
    pytest.importorskip("timm" if target == "timm" else "transformers")
    assert main(["convert", str(DATA / "A_params.npz"), str(tmp_path / dst), "--to", target]) == 0
    # a timm state dict does not record the GELU flavour: say it; a transformers directory does
    extra = {"activation": "gelu_tanh", "num_heads": 3} if target == "timm" else {}
    model = vitkit.load_weights(tmp_path / dst, **extra)
    io = official_io("A")
    with torch.no_grad():
        error = max_abs(model(nchw(io["inputs"])), io["logits"])
    print(f"\nA -> {target} -> vitkit: logits {error:.2e}")
    assert error <= 1e-5


def write_images(folder: Path) -> list[Path]:
    """One image per supported kind, all showing the same picture."""
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    gray = rgb[..., 0]
    paths = {
        "photo.jpg": Image.fromarray(rgb),
        "gray.png": Image.fromarray(gray),
        "photo.webp": Image.fromarray(rgb),
        "alpha.png": Image.fromarray(np.dstack([rgb, np.full_like(gray, 128)])),
        "deep.png": Image.fromarray(gray.astype(np.uint16) * 257),
    }
    for name, image in paths.items():
        image.save(folder / name)
    return [folder / name for name in paths]


def test_image_kinds_are_converted(tmp_path: Path) -> None:
    jpg, gray, webp, alpha, deep = write_images(tmp_path)
    assert Image.open(deep).mode.startswith("I")
    for path in (jpg, gray, webp, alpha, deep):
        pixels = decode_image(path)
        assert pixels.dtype == torch.uint8 and pixels.shape == (3, 40, 56), path.name
    assert torch.equal(decode_image(deep), decode_image(gray))  # 16-bit scaled down exactly
    rgb = torch.from_numpy(np.array(Image.open(alpha).convert("RGB"))).permute(2, 0, 1).double()
    over_white = rgb * 128 / 255 + 255 * 127 / 255  # alpha 128 composited onto white, as every reader does
    assert (decode_image(alpha).double() - over_white).abs().max() <= 1


def test_predict_table_and_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    images = write_images(tmp_path)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(f"class_{i}" for i in range(10)))
    argv = [
        "predict",
        *map(str, images[:2]),
        str(broken),
        *map(str, images[2:]),
        "--weights",
        str(DATA / "A_params.npz"),
        "--labels",
        str(labels),
        "--topk",
        "3",
    ]
    assert main(argv) == 1  # the readable ones classified, but a named file failed
    out, err = capsys.readouterr()
    skipped = [line for line in err.splitlines() if line.startswith("vitkit predict: skipping")]
    assert len(skipped) == 1 and f"skipping {broken}: not an image" in skipped[0]
    for path in images:
        assert str(path) in out
    assert out.count("class_") == 3 * len(images)
    rank1 = [line.split() for line in out.splitlines() if line.strip().startswith("1 ")]
    assert len(rank1) == len(images) and all(0 <= float(row[1]) <= 1 for row in rank1)


def test_predict_matches_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vitkit.data.transforms import eval_transform

    path = write_images(tmp_path)[0]
    argv = ["predict", str(path), "--weights", str(DATA / "A_params.npz"), "--topk", "1"]
    # in the precision and on the device of the reference below
    assert main([*argv, "--precision", "fp32", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out.splitlines()[-1].split()
    model = vitkit.load_weights(DATA / "A_params.npz")
    with torch.no_grad():
        probs = model(eval_transform(decode_image(path)[None], 32, 3)).softmax(-1)[0]
    assert int(printed[2]) == int(probs.argmax()) and abs(float(printed[1]) - probs.max().item()) < 1e-4


def test_predict_reads_a_directory_and_skips_like_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    images = write_images(folder)
    (folder / "broken.png").write_bytes(b"not a png")
    argv = ["--weights", str(DATA / "A_params.npz"), "--topk", "1"]
    assert main(["predict", str(folder), *argv]) == 0  # a skipped file is reported; exit 0, as inspect
    out, err = capsys.readouterr()
    assert all(str(path) in out for path in images)
    skipped = [line for line in err.splitlines() if line.startswith("vitkit predict: skipping")]
    assert len(skipped) == 1 and skipped[0].startswith(f"vitkit predict: skipping {folder / 'broken.png'}: ")
    assert main(["predict", str(folder / "broken.png"), *argv]) == 2  # nothing readable: an error
    assert "no readable image" in capsys.readouterr().err


def test_a_missing_file_named_as_a_published_one_names_the_checkpoints_that_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no ViT-B_16.npz here: the docs' file name, copied as if it were a name
    assert main(["predict", "photo.jpg", "--weights", "ViT-B_16.npz"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(
        "vitkit predict: error: ViT-B_16.npz: no such file or directory; "
    )
    assert "ViT-B/16-i21k (imagenet21k/ViT-B_16.npz)" in err
    assert "ViT-B/16-i21k-in1k-384 (imagenet21k+imagenet2012/ViT-B_16.npz)" in err
    with pytest.raises(
        FileNotFoundError, match=r"^vit-l_32\.npz: .*: ViT-L/32-i21k \(imagenet21k/ViT-L_32\.npz\)"
    ):
        vitkit.load_weights("vit-l_32.npz")
    with pytest.raises(
        FileNotFoundError, match=r"^mine\.npz: no such file or directory$"
    ):  # no published file
        vitkit.load_weights("mine.npz")
