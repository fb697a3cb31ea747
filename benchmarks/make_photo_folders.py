#!/usr/bin/env python3
"""Sort the sample photographs shipped in scikit-image and scikit-learn into class folders (train / val).

The result is a small ImageFolder of real images of mixed sizes (102 px to 1411 px) and modes (RGB, RGBA,
grayscale, 1-bit, palette) stored as JPEG and PNG: the kind of folder a user fine-tunes on, and a check
that every reader copes with every mode. Three classes by content; every third image of a class is val.

    benchmarks/make_photo_folders.py /work/big/photos
    vitkit finetune --weights ViT-B_16.npz data.source=folder:/work/big/photos ...

It needs scikit-image and scikit-learn: `pip install 'vitkit[bench]'` (`make setup` and `make run` install them).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

try:
    import skimage.data
    from sklearn.datasets import load_sample_images
except ImportError as missing:
    raise SystemExit(
        f"make_photo_folders.py needs scikit-image and scikit-learn ({missing.name} is missing): "
        "pip install 'vitkit[bench]'"
    ) from None

# name -> (class, PIL mode to store, file format); the modes are chosen so that every one occurs.
PHOTOS = {
    "astronaut": ("scene", "RGB", "JPEG"),
    "camera": ("scene", "L", "JPEG"),
    "cat": ("scene", "RGB", "JPEG"),
    "chelsea": ("scene", "RGB", "PNG"),
    "coffee": ("scene", "RGB", "JPEG"),
    "rocket": ("scene", "RGB", "JPEG"),
    "clock": ("scene", "L", "PNG"),
    "coins": ("scene", "L", "JPEG"),
    "hubble_deep_field": ("scene", "RGB", "JPEG"),
    "sklearn_china": ("scene", "RGB", "JPEG"),
    "sklearn_flower": ("scene", "RGB", "JPEG"),
    "brick": ("texture", "L", "PNG"),
    "grass": ("texture", "L", "JPEG"),
    "gravel": ("texture", "L", "PNG"),
    "moon": ("texture", "L", "JPEG"),
    "cell": ("texture", "L", "PNG"),
    "immunohistochemistry": ("texture", "RGB", "JPEG"),
    "retina": ("texture", "RGB", "JPEG"),
    "microaneurysms": ("texture", "L", "PNG"),
    "page": ("graphic", "L", "PNG"),
    "text": ("graphic", "L", "JPEG"),
    "logo": ("graphic", "RGBA", "PNG"),
    "colorwheel": ("graphic", "P", "PNG"),
    "checkerboard": ("graphic", "L", "PNG"),
    "horse": ("graphic", "1", "PNG"),
    "binary_blobs": ("graphic", "1", "PNG"),
}


def load_pixels(name: str) -> np.ndarray:
    """The uint8 (or bool) array of one sample image, from scikit-learn or scikit-image."""
    if name.startswith("sklearn_"):
        bunch = load_sample_images()
        files = [Path(f).stem for f in bunch.filenames]
        return bunch.images[files.index(name.removeprefix("sklearn_"))]
    return getattr(skimage.data, name)()


def to_image(pixels: np.ndarray, mode: str) -> Image.Image:
    """The array as a PIL image in the wanted mode (bool -> 1-bit, RGB -> palette via an adaptive palette)."""
    if pixels.dtype == bool:
        pixels = pixels.astype(np.uint8) * 255
    image = Image.fromarray(pixels)
    if mode == "P":
        return image.convert("RGB").quantize(colors=64)
    return image.convert(mode)


def main() -> None:
    """Write root/{train,val}/<class>/<name>.{jpg,png} and print counts, sizes and modes."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path)
    args = parser.parse_args()
    seen: Counter[str] = Counter()
    for name, (label, mode, fmt) in PHOTOS.items():
        split = "val" if seen[label] % 3 == 2 else "train"
        seen[label] += 1
        image = to_image(load_pixels(name), mode)
        folder = args.root / split / label
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.{'jpg' if fmt == 'JPEG' else 'png'}"
        image.save(path, format=fmt)
        print(f"{path}  {image.width}x{image.height} {image.mode}")
    for split in ("train", "val"):
        counts = {d.name: len(list(d.iterdir())) for d in sorted((args.root / split).iterdir())}
        print(f"{split}: {counts}")


if __name__ == "__main__":
    main()
