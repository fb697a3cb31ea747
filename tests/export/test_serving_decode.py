"""A client that decodes images by the serving metadata's `decode` steps, and nothing of vitkit's code, gets the
pixels `vitkit predict` feeds the model, for files in every mode (vitkit.export.metadata.DECODE_STEPS)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageOps

from tiny import build_tiny_vit
from vitkit.data.decode import decode_image
from vitkit.export.metadata import DECODE_STEPS, serving_metadata

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, (6, 10, 3), dtype=np.uint8)
ALPHA = RNG.integers(0, 256, (6, 10), dtype=np.uint8)
WIDE16 = RNG.integers(0, 65536, (6, 10), dtype=np.uint32)


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def png_rgb16(pixels: np.ndarray) -> bytes:
    """A 48-bit PNG (16 bits per colour channel), which Pillow cannot write."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    height, width, _ = pixels.shape
    rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in pixels)
    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def rotated_jpeg() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees
    return encode(Image.fromarray(RGB), "jpeg", exif=exif, quality=95)


def transparent_palette() -> bytes:
    palette = Image.fromarray(RGB).quantize(colors=8)
    return encode(palette, "png", transparency=0)


FILES = {
    "RGB JPEG, EXIF-rotated": rotated_jpeg(),
    "16-bit grey PNG": encode(Image.fromarray(WIDE16.astype(np.uint16)), "png"),
    "16-bit colour PNG": png_rgb16(RNG.integers(0, 65536, (6, 10, 3))),
    "32-bit integer TIFF": encode(Image.fromarray(WIDE16.astype(np.int32), "I"), "tiff"),
    "32-bit integer TIFF within 8 bits": encode(
        Image.fromarray((WIDE16 % 256).astype(np.int32), "I"), "tiff"
    ),
    "float TIFF in [0, 1]": encode(Image.fromarray(RNG.random((6, 10)).astype(np.float32), "F"), "tiff"),
    "RGBA PNG": encode(Image.fromarray(np.dstack([RGB, ALPHA]), "RGBA"), "png"),
    "LA PNG": encode(Image.fromarray(np.dstack([RGB[..., 0], ALPHA]), "LA"), "png"),
    "palette PNG with a transparent colour": transparent_palette(),
    "CMYK TIFF": encode(Image.fromarray(RGB).convert("CMYK"), "tiff"),
    "CMYK JPEG": encode(Image.fromarray(RGB).convert("CMYK"), "jpeg", quality=95),
    "1-bit PNG": encode(Image.fromarray(RGB[..., 0] > 127), "png"),
    "grey JPEG": encode(Image.fromarray(RGB[..., 1]), "jpeg"),
}


def client_pixels(data: bytes, channels: int) -> np.ndarray:
    """The `decode` steps, as a server would write them from the metadata alone: [H, W, channels] uint8."""
    image = Image.open(io.BytesIO(data))
    image.seek(0)  # the first frame
    image = ImageOps.exif_transpose(image)
    if image.mode in ("I", "F") or image.mode.startswith("I;16"):
        values = np.asarray(image, dtype=np.float64)
        assert np.isfinite(values).all()
        if image.mode == "F":
            values = values * 255 if values.max() <= 1 else values
        elif image.mode.startswith("I;16") or values.max() > 255:
            values = values / 257
        image = Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), "L")
    if "A" in image.getbands() or "a" in image.getbands() or "transparency" in image.info:
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, image.convert("RGBA"))
    mode = "RGB" if channels == 3 else "L"
    if image.mode != mode:
        image = image.convert(mode)
    return np.asarray(image).reshape(image.height, image.width, channels)


def test_the_metadata_states_the_steps():
    metadata = serving_metadata(build_tiny_vit())
    assert metadata["decode"] == DECODE_STEPS
    text = " ".join(DECODE_STEPS)
    for rule in ("first frame", "exif_transpose", "round(v / 257)", "v >> 8", "onto opaque white", "convert"):
        assert rule in text


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("channels", [3, 1])
def test_a_client_following_the_steps_gets_predicts_pixels(name, channels):
    expected = decode_image(FILES[name], channels=channels).permute(1, 2, 0).numpy()
    assert np.array_equal(client_pixels(FILES[name], channels), expected)
