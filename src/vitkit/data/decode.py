"""The one image decoder every vitkit reader uses (predict, inspect, ImageFolder and the streaming sources).

One rule for every reader, so the same file gives the same pixels everywhere:

- Reading: only regular files are opened (a FIFO, device or socket is refused without blocking on it), and a
  file of more than `max_bytes` bytes (default DEFAULT_MAX_BYTES; set VITKIT_MAX_IMAGE_BYTES) is refused from
  its size before any byte is read, so a symlink to /dev/zero or a stray 3 GB file costs no memory.
- Size: an image of more than `max_pixels` pixels (default DEFAULT_MAX_PIXELS, about 89.5 Mpixel; set
  VITKIT_MAX_IMAGE_PIXELS or pass max_pixels) is refused from its header, before any pixel is decoded, so a
  decompression bomb (a 20 KB PNG of 169 Mpixel) costs nothing.
- Orientation: the EXIF orientation is applied. Multi-frame files (GIF, TIFF) give their first frame.
- Transparency (an alpha band, or a palette/greyscale/RGB transparent colour) is composited onto white.
- 16-bit integer pixels are scaled to 8 bits (v / 257). 32-bit integer pixels are read as 16-bit when any
  exceeds 255, else as 8-bit. Float pixels are read as [0, 1] when none exceeds 1, else as [0, 255]; both
  clipped. NaN or infinite pixels are an error.
- Palette, 1-bit, greyscale, CMYK, YCbCr, LAB and HSV images are converted by Pillow; 3 channels are RGB,
  1 channel is Pillow's luminance (ITU-R 601-2: 0.299 R + 0.587 G + 0.114 B).

Every failure is an ImageDecodeError whose one-line message names the file and what was expected.
"""

from __future__ import annotations

import io
import os
import stat
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's warning threshold: a 3-channel 8-bit image of 256 MiB (~9,459^2)
MAX_PIXELS_ENV = "VITKIT_MAX_IMAGE_PIXELS"
# The largest sensible image file: one at the pixel limit stored uncompressed as 8-bit RGBA (BMP, TIFF).
DEFAULT_MAX_BYTES = 4 * DEFAULT_MAX_PIXELS
MAX_BYTES_ENV = "VITKIT_MAX_IMAGE_BYTES"
CHANNELS = (1, 3)
# What every reader takes for an image file (lower case): torchvision ImageFolder's extensions, and GIF (its first
# frame), which Pillow decodes too.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")

ImageSource = str | os.PathLike | bytes  # a path is read with read_file


class ImageDecodeError(ValueError):
    """An image that cannot be used: unreadable, too large, or with non-finite pixels."""


def _limit(value: int | None, variable: str, default: int, unit: str) -> int:
    """`value`, else the whole number in $`variable`, else `default`; a positive number of `unit`."""
    if value is None:
        raw = os.environ.get(variable, "").strip()
        if not raw:
            return default
        try:
            value = int(raw.replace("_", ""))
        except ValueError:
            raise ValueError(f"{variable}={raw!r}: expected a whole number of {unit}") from None
    if value < 1:
        raise ValueError(f"the limit must be a positive number of {unit}, got {value}")
    return value


def max_pixels_limit(max_pixels: int | None = None) -> int:
    """The pixel limit in force: the argument, else $VITKIT_MAX_IMAGE_PIXELS, else DEFAULT_MAX_PIXELS."""
    return _limit(max_pixels, MAX_PIXELS_ENV, DEFAULT_MAX_PIXELS, "pixels")


def max_bytes_limit(max_bytes: int | None = None) -> int:
    """The file size limit in force: the argument, else $VITKIT_MAX_IMAGE_BYTES, else DEFAULT_MAX_BYTES."""
    return _limit(max_bytes, MAX_BYTES_ENV, DEFAULT_MAX_BYTES, "bytes")


def check_byte_size(size: int, name: str, limit: int | None = None) -> None:
    """Refuse an image file (or archive member) of `size` bytes above the limit, before reading it."""
    limit = max_bytes_limit(limit)
    if size > limit:
        raise ImageDecodeError(
            f"{name}: {size:,} bytes is above the limit of {limit:,} for an image file "
            f"(raise it with {MAX_BYTES_ENV})"
        )


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages."""
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))  # fmt: skip
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def read_file(
    path: str | bytes | os.PathLike, name: str | None = None, max_bytes: int | None = None
) -> bytes:
    """The bytes of the regular file `path`, refused (ImageDecodeError) without blocking or reading when it is
    a FIFO, device, socket or directory, or larger than the byte limit; OSError when it cannot be opened."""
    label = name or os.fsdecode(path)
    limit = max_bytes_limit(max_bytes)
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ImageDecodeError(
                f"{label}: {file_kind(info.st_mode)}, not a regular file (expected an image file)"
            )
        check_byte_size(info.st_size, label, limit)
        data = file.read(limit + 1)  # a file that grew since fstat is still bounded
    check_byte_size(len(data), label, limit)
    return data


def _raster_formats() -> list[str]:
    """Every format Pillow reads except EPS, whose decoding runs Ghostscript on the file."""
    Image.init()
    return [fmt for fmt in Image.OPEN if fmt != "EPS"]


def printable(text: str) -> str:
    """`text` as valid Unicode that any stream or figure takes: the bytes of a file name that are not UTF-8 (held
    by Python as surrogates) as \\xNN, any other lone surrogate as \\uNNNN."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _display_name(source: ImageSource, name: str | None) -> str:
    if name is not None:
        return printable(name)
    return "<image bytes>" if isinstance(source, (bytes, bytearray, memoryview)) else printable(str(source))


def _open(source: bytes | bytearray | memoryview, name: str, limit: int) -> Image.Image:
    """The image with only its header read, refused when larger than `limit` pixels."""
    # Pillow's own bomb check must not refuse what the user allowed (its warning is silenced below).
    if Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS < limit:
        Image.MAX_IMAGE_PIXELS = limit
    stream = io.BytesIO(source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(stream, formats=_raster_formats())
    except Image.DecompressionBombError:
        raise ImageDecodeError(
            f"{name}: more than {2 * (Image.MAX_IMAGE_PIXELS or limit):,} pixels, above the limit of {limit:,} "
            f"(expected at most {limit:,} pixels; raise it with {MAX_PIXELS_ENV})"
        ) from None
    except Exception as error:  # Pillow's parsers raise many types on hostile input; all mean "not an image"
        why = "unknown format" if isinstance(error, UnidentifiedImageError) else _one_line(error)
        raise ImageDecodeError(
            f"{name}: not an image vitkit can read ({why}; expected PNG, JPEG, WebP, GIF, BMP, TIFF, ...)"
        ) from None
    width, height = image.size
    if width * height > limit:
        image.close()
        raise ImageDecodeError(
            f"{name}: {width}x{height} = {width * height:,} pixels is above the limit of {limit:,} "
            f"(expected at most {limit:,} pixels; raise it with {MAX_PIXELS_ENV})"
        )
    if width * height == 0:
        image.close()
        raise ImageDecodeError(f"{name}: {width}x{height} image has no pixels (expected at least 1x1)")
    return image


def _read_path(path: str | bytes | os.PathLike, name: str) -> bytes:
    """read_file with the open errors of a path as one-line ImageDecodeErrors."""
    try:
        return read_file(path, name)
    except FileNotFoundError:
        raise ImageDecodeError(f"{name}: no such file (expected an image file)") from None
    except IsADirectoryError:
        raise ImageDecodeError(f"{name}: is a directory (expected an image file)") from None
    except PermissionError:
        raise ImageDecodeError(f"{name}: permission denied (expected a readable image file)") from None
    except OSError as error:
        raise ImageDecodeError(f"{name}: cannot read ({error.strerror or error})") from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or "no details"


def image_size(
    source: ImageSource, *, name: str | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """(width, height) from the header alone, with the same pixel limit and errors as decode_image."""
    label = _display_name(source, name)
    if not isinstance(source, (bytes, bytearray, memoryview)):
        source = _read_path(source, label)
    with _open(source, label, max_pixels_limit(max_pixels)) as image:
        return image.size


def _eight_bit(image: Image.Image, name: str) -> Image.Image:
    """16/32-bit integer and float images as 8-bit greyscale by the module's rule; others unchanged."""
    if not (image.mode in ("I", "F") or image.mode.startswith("I;16")):
        return image
    values = np.asarray(image, dtype=np.float64)
    if image.mode == "F":
        if not np.isfinite(values).all():
            bad = int((~np.isfinite(values)).sum())
            raise ImageDecodeError(f"{name}: {bad} NaN or infinite pixel(s) (expected finite values)")
        values = values * 255.0 if values.max(initial=0.0) <= 1.0 else values
    elif image.mode.startswith("I;16") or values.max(initial=0.0) > 255:
        values = values / 257.0
    return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), "L")


def _has_transparency(image: Image.Image) -> bool:
    return "A" in image.getbands() or "a" in image.getbands() or "transparency" in image.info


def _pixels(image: Image.Image, name: str, channels: int) -> np.ndarray:
    """Decoded pixels [H, W, channels] uint8 by the module's rule."""
    image.load()
    ImageOps.exif_transpose(image, in_place=True)  # in place: no copy of an image that is upright already
    image = _eight_bit(image, name)
    if _has_transparency(image):
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    mode = "RGB" if channels == 3 else "L"
    if image.mode != mode:
        image = image.convert(mode)
    return np.array(image, dtype=np.uint8).reshape(image.height, image.width, channels)


def decode_image(
    source: ImageSource, *, name: str | None = None, channels: int = 3, max_pixels: int | None = None
) -> torch.Tensor:
    """A uint8 tensor [channels, H, W] from a path or encoded bytes, by the module's rule.

    `name` is what messages call the image (default: the path, or "<image bytes>"); `max_pixels` overrides
    $VITKIT_MAX_IMAGE_PIXELS. Raises ImageDecodeError (a ValueError) naming the image on any failure.
    """
    if channels not in CHANNELS:
        raise ValueError(f"channels must be one of {CHANNELS}, got {channels}")
    label = _display_name(source, name)
    if not isinstance(source, (bytes, bytearray, memoryview)):
        source = _read_path(source, label)
    with _open(source, label, max_pixels_limit(max_pixels)) as image:
        try:
            pixels = _pixels(image, label, channels)
        except ImageDecodeError:
            raise
        except Exception as error:  # truncated data, broken chunks, unsupported modes, ...
            raise ImageDecodeError(
                f"{label}: cannot decode {image.format or 'image'} {image.mode} data "
                f"({type(error).__name__}: {_one_line(error)}; expected a complete image)"
            ) from None
    return torch.from_numpy(pixels).permute(2, 0, 1)  # channels last in memory, as decoded: no copy


def find_images(paths: Iterable[str | os.PathLike]) -> tuple[list[Path], list[dict[str, str]]]:
    """Files as given, directories expanded (recursively, sorted) to their image files by extension, and the
    skipped paths [{path, reason}] that do not exist or are not regular files (a FIFO named like an image)."""
    files: list[Path] = []
    skipped: list[dict[str, str]] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(
                f for f in path.rglob("*") if f.suffix.lower() in IMAGE_EXTENSIONS and not f.is_dir()
            )
            files.extend(f for f in found if f.is_file())
            skipped.extend(_not_regular(f) for f in found if not f.is_file())
        elif path.is_file():
            files.append(path)
        else:
            skipped.append(_not_regular(path))
    return files, skipped


def _not_regular(path: Path) -> dict[str, str]:
    """The skip entry of a path that is not a regular file (or not there)."""
    try:
        reason = f"{file_kind(path.stat().st_mode)}, not a regular file"
    except FileNotFoundError:
        reason = "no such file or directory"
    except OSError as error:
        reason = error.strerror or str(error)
    return {"path": printable(str(path)), "reason": reason}
