"""Images of any mode from disk to model inputs; unreadable files are reported, not fatal."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from vitkit.data import eval_transform

DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)


def image_extensions() -> set[str]:
    return {ext.lower() for ext in Image.registered_extensions()}


def expand_paths(paths: list[str | os.PathLike]) -> tuple[list[Path], list[dict[str, str]]]:
    """Files as given, directories expanded (recursively, sorted) to their image files; missing paths skipped."""
    files: list[Path] = []
    skipped: list[dict[str, str]] = []
    exts = image_extensions()
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in exts))
        elif p.is_file():
            files.append(p)
        else:
            skipped.append({"path": str(p), "reason": "no such file or directory"})
    return files, skipped


def to_rgb_uint8(image: Image.Image) -> np.ndarray:
    """[H, W, 3] uint8 from any PIL mode: 16/32-bit grey scaled from the 16-bit range, float grey from [0, 1]
    (or clipped to [0, 255]), transparency composited on white, palette/CMYK/LAB/... converted."""
    image = ImageOps.exif_transpose(image)
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N") or image.mode.startswith("I;16"):
        grey = np.asarray(image).astype(np.float64)
        grey = grey / 257.0 if grey.max(initial=0) > 255 or image.mode != "I" else grey
        image = Image.fromarray(np.clip(np.round(grey), 0, 255).astype(np.uint8), "L")
    elif image.mode == "F":
        grey = np.asarray(image).astype(np.float64)
        grey = grey * 255.0 if np.nanmax(grey, initial=0) <= 1.0 else grey
        image = Image.fromarray(np.clip(np.nan_to_num(np.round(grey)), 0, 255).astype(np.uint8), "L")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        image.mode == "P" and "transparency" in image.info
    ):
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return np.asarray(image.convert("RGB"), dtype=np.uint8)


def read_images(
    paths: list[str | os.PathLike], limit: int | None = None
) -> tuple[list[np.ndarray], list[str], list[dict[str, str]]]:
    """(RGB uint8 arrays, their paths, skipped [{path, reason}]) for files and directories of images; reading
    stops after `limit` readable images."""
    files, skipped = expand_paths(paths)
    arrays, names = [], []
    for f in files:
        if limit is not None and len(arrays) >= limit:
            break
        try:
            with Image.open(f) as image:
                image.load()
                arrays.append(to_rgb_uint8(image))
            names.append(str(f))
        except DECODE_ERRORS as error:
            skipped.append(
                {"path": str(f), "reason": f"cannot decode image ({type(error).__name__}: {error})"}
            )
    return arrays, names, skipped


def preprocess(arrays: list[np.ndarray], img_size: tuple[int, int], in_chans: int) -> torch.Tensor:
    """The eval preprocessing (resize to the model size, bilinear with antialiasing; values to [-1, 1];
    RGB to luminance for 1-channel models): [N, in_chans, H, W] float32."""
    out = []
    for a in arrays:
        x = torch.from_numpy(np.array(a, dtype=np.uint8, copy=True)).permute(2, 0, 1)[None]
        out.append(eval_transform(x, tuple(img_size), in_chans))
    if not out:
        return torch.empty(0, in_chans, *img_size)
    return torch.cat(out)

