"""vitkit.data.decode: one rule for every image mode, bombs refused from the header, one-line errors."""

from __future__ import annotations

import io
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile

from vitkit.data import open_source
from vitkit.data.decode import DEFAULT_MAX_PIXELS, MAX_PIXELS_ENV, ImageDecodeError, decode_image, image_size
from vitkit.inspect.images import read_images

GREY = np.arange(256, dtype=np.uint8).reshape(16, 16)


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_bomb(width: int, height: int) -> bytes:
    """A valid 1-bit PNG of width x height black pixels: a few KB that would decode to width*height bytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte + packed bits
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def grey_palette_image() -> Image.Image:
    image = Image.fromarray(255 - GREY, "P")
    image.putpalette([v for g in range(255, -1, -1) for v in (g, g, g)])  # index i shows grey 255 - i
    return image


@pytest.mark.parametrize(
    ("mode", "image", "fmt"),
    [
        ("L", Image.fromarray(GREY, "L"), "png"),
        ("1-bit", Image.fromarray(GREY >= 128), "png"),
        ("I;16", Image.fromarray(GREY.astype(np.uint16) * 257), "png"),
        ("I", Image.fromarray(GREY.astype(np.int32) * 257, "I"), "tiff"),
        ("I 8-bit range", Image.fromarray(GREY.astype(np.int32), "I"), "tiff"),
        ("F [0, 1]", Image.fromarray(GREY.astype(np.float32) / 255, "F"), "tiff"),
        ("F [0, 255]", Image.fromarray(GREY.astype(np.float32), "F"), "tiff"),
        ("RGBA opaque", Image.fromarray(np.dstack([GREY] * 3 + [np.full_like(GREY, 255)]), "RGBA"), "png"),
        ("LA opaque", Image.fromarray(np.dstack([GREY, np.full_like(GREY, 255)]), "LA"), "png"),
        ("P", grey_palette_image(), "png"),
        ("CMYK", Image.fromarray(np.dstack([GREY] * 3)).convert("CMYK"), "tiff"),
        ("RGB", Image.fromarray(np.dstack([GREY] * 3)), "webp"),
    ],
)
def test_every_mode_gives_the_same_grey(mode: str, image: Image.Image, fmt: str) -> None:
    data = encode(image, fmt, **({"lossless": True} if fmt == "webp" else {}))
    rgb = decode_image(data, name=mode)
    assert rgb.dtype == torch.uint8 and rgb.shape == (3, 16, 16), mode
    expected = torch.from_numpy(GREY).int()
    if mode == "1-bit":
        expected = (expected >= 128).int() * 255
    tolerance = 1 if mode == "CMYK" else 0  # CMYK's round trip
    for channel in rgb.int():
        assert (channel - expected).abs().max() <= tolerance, mode
    grey = decode_image(data, name=mode, channels=1)
    assert grey.shape == (1, 16, 16) and (grey.int() - rgb.int()[0]).abs().max() <= 1, mode


def test_transparency_is_composited_onto_white() -> None:
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[:, :2, 3] = 255  # left half opaque red, right half transparent
    pixels = decode_image(encode(Image.fromarray(rgba, "RGBA"), "png"))
    assert pixels[:, :, :2].flatten(1).unique(dim=1).tolist() == [[200], [0], [0]]
    assert (pixels[:, :, 2:] == 255).all()
    palette = Image.fromarray(np.zeros((4, 4), np.uint8), "P")
    palette.info["transparency"] = 0
    assert (decode_image(encode(palette, "png", transparency=0)) == 255).all()  # transparent palette entry


def test_exif_orientation_is_applied() -> None:
    wide = Image.fromarray(np.zeros((4, 8, 3), np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees
    assert decode_image(encode(wide, "jpeg", exif=exif)).shape == (3, 8, 4)


def test_a_decompression_bomb_costs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = png_bomb(13_000, 13_000)  # 169 Mpixel
    assert len(bomb) < 60_000
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: pytest.fail("pixels were decoded"))
    start = time.perf_counter()
    with pytest.raises(
        ImageDecodeError, match=r"bomb.png: 13000x13000 = 169,000,000 pixels is above the limit"
    ):
        decode_image(bomb, name="bomb.png")
    with pytest.raises(ImageDecodeError, match="above the limit"):
        image_size(bomb, name="bomb.png")
    assert time.perf_counter() - start < 1.0


def test_the_pixel_limit_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(Image.fromarray(GREY, "L"), "png")
    assert DEFAULT_MAX_PIXELS > 256
    with pytest.raises(ImageDecodeError, match="256 pixels is above the limit of 255"):
        decode_image(data, name="g.png", max_pixels=255)
    monkeypatch.setenv(MAX_PIXELS_ENV, "100")
    with pytest.raises(ImageDecodeError, match="above the limit of 100"):
        decode_image(data, name="g.png")
    assert decode_image(data, name="g.png", max_pixels=256).shape == (3, 16, 16)  # the argument wins
    monkeypatch.setenv(MAX_PIXELS_ENV, "lots")
    with pytest.raises(ValueError, match=f"{MAX_PIXELS_ENV}='lots'"):
        decode_image(data)


def test_broken_images_are_one_line_errors_naming_the_file(tmp_path: Path) -> None:
    noise = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    png = encode(Image.fromarray(noise), "png")
    nan = np.full((4, 4), 0.5, np.float32)
    nan[1, 2] = np.nan
    inf = np.full((4, 4), np.inf, np.float32)
    cases = {
        "garbage.png": (b"not an image at all", "not an image vitkit can read"),
        "empty.png": (b"", "not an image vitkit can read"),
        "truncated.png": (png[:300], "expected a complete image"),
        "header_only.png": (png[:33], "not an image vitkit can read"),
        "nan.tif": (encode(Image.fromarray(nan, "F"), "tiff"), "1 NaN or infinite pixel"),
        "inf.tif": (encode(Image.fromarray(inf, "F"), "tiff"), "16 NaN or infinite pixel"),
    }
    for name, (data, expected) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        for source in (path, data):
            with pytest.raises(ImageDecodeError) as error:
                decode_image(source, name=str(path))
            message = str(error.value)
            assert message.startswith(f"{path}: ") and expected in message and "\n" not in message, message
    with pytest.raises(ImageDecodeError, match="missing.png: no such file"):
        decode_image(tmp_path / "missing.png")
    with pytest.raises(ImageDecodeError, match="is a directory"):
        decode_image(tmp_path)


def test_every_reader_refuses_the_bomb(tmp_path: Path) -> None:
    """inspect and the ImageFolder source both go through decode_image: the same file, the same refusal."""
    for split in ("train", "test"):
        (tmp_path / split / "a").mkdir(parents=True)
        Image.fromarray(GREY, "L").save(tmp_path / split / "a" / "ok.png")
        (tmp_path / split / "a" / "bomb.png").write_bytes(png_bomb(13_000, 13_000))
    folder = open_source(str(tmp_path), "train")
    with pytest.raises(ImageDecodeError, match="bomb.png: 13000x13000"):
        [folder.read(i) for i in range(len(folder))]
    images, names, skipped = read_images([tmp_path / "train"])
    assert len(images) == 1 and "13000x13000" in skipped[0]["reason"]
