"""Write a large class-folder collection of JPEGs for scale tests: root/train/<class>/*.jpg, root/val/<class>/*.jpg.

Every image is a pure function of (seed, split, index): a class-coloured low-frequency pattern (a few
random blobs on a gradient) plus mild noise, so JPEG sizes are realistic and a model can learn the
classes. Sizes vary in [min-size, max-size] per side; the decoded size (sum of H * W * 3 bytes) is
printed at the end, so one can check it exceeds what fits in memory (the default: ~100k images,
~25 GB decoded, ~2 GB of JPEGs).

    nice -n 5 python benchmarks/make_image_collection.py /work/big/collection [--train 100000] [--val 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

# Class colours (RGB) far apart, so the classes differ in a way a small model sees quickly.
PALETTE = np.array(
    [
        [200, 60, 50],
        [60, 170, 70],
        [50, 80, 200],
        [210, 190, 60],
        [150, 70, 180],
        [60, 180, 190],
        [230, 130, 40],
        [120, 120, 120],
    ],
    dtype=np.float32,
)
SPLIT_KEYS = {"train": 0, "val": 1}


def image_size(rng: np.random.Generator, min_size: int, max_size: int) -> tuple[int, int]:
    """(height, width), each side drawn independently, so aspect ratios vary a little around square."""
    height, width = rng.integers(min_size, max_size + 1, size=2)
    return int(height), int(width)


def render(
    seed: int, split: str, index: int, classes: int, min_size: int, max_size: int
) -> tuple[Image.Image, int]:
    """The image and class of sample `index` of `split`: identical for identical arguments."""
    rng = np.random.default_rng([seed, SPLIT_KEYS[split], index])
    label = index % classes
    height, width = image_size(rng, min_size, max_size)
    # A coarse 6x6 field upscaled bilinearly gives smooth, photo-like structure at a low cost.
    coarse = rng.normal(0.0, 45.0, size=(6, 6, 3)).astype(np.float32) + PALETTE[label % len(PALETTE)]
    if label >= len(PALETTE):  # more classes than colours: tell them apart by a vertical gradient too
        coarse += np.linspace(-40, 40, 6, dtype=np.float32)[:, None, None] * (label // len(PALETTE))
    smooth = Image.fromarray(np.clip(coarse, 0, 255).astype(np.uint8)).resize((width, height), Image.BILINEAR)
    pixels = np.asarray(smooth, dtype=np.int16) + rng.integers(
        -12, 13, size=(height, width, 3), dtype=np.int16
    )
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)), label


def write_one(job: tuple[str, int, str, int, int, int, int]) -> tuple[int, int]:
    """Write one JPEG (skipped when it already exists: a killed run continues); returns (decoded bytes, file bytes)."""
    root, seed, split, index, classes, min_size, max_size = job
    rng = np.random.default_rng([seed, SPLIT_KEYS[split], index])
    height, width = image_size(rng, min_size, max_size)
    path = Path(root) / split / f"class_{index % classes}" / f"{split}_{index:07d}.jpg"
    if not path.exists():
        image, _ = render(seed, split, index, classes, min_size, max_size)
        partial = path.with_suffix(".part")
        image.save(partial, format="JPEG", quality=90)
        os.replace(partial, path)
    return height * width * 3, path.stat().st_size


def main() -> None:
    """Write the collection with a progress bar, then print and save its counts and sizes."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("root", type=Path)
    parser.add_argument("--train", type=int, default=100_000, help="training images")
    parser.add_argument("--val", type=int, default=1_000, help="validation images")
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--min-size", type=int, default=256, help="smallest side length in pixels")
    parser.add_argument("--max-size", type=int, default=320, help="largest side length in pixels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="writer processes")
    args = parser.parse_args()
    if args.min_size < 1 or args.max_size < args.min_size:
        parser.error(f"--min-size {args.min_size} / --max-size {args.max_size}: need 1 <= min <= max")
    for split in SPLIT_KEYS:
        for label in range(args.classes):
            (args.root / split / f"class_{label}").mkdir(parents=True, exist_ok=True)
    jobs = [
        (str(args.root), args.seed, split, index, args.classes, args.min_size, args.max_size)
        for split, count in (("train", args.train), ("val", args.val))
        for index in range(count)
    ]
    start = time.perf_counter()
    decoded = stored = 0
    with Pool(args.workers) as pool:
        for decoded_bytes, file_bytes in tqdm(
            pool.imap_unordered(write_one, jobs, chunksize=256),
            total=len(jobs),
            unit="img",
            desc=str(args.root),
            mininterval=5.0,
        ):
            decoded += decoded_bytes
            stored += file_bytes
    summary = {
        "train_images": args.train,
        "val_images": args.val,
        "classes": args.classes,
        "sizes": f"{args.min_size}-{args.max_size} px per side",
        "seed": args.seed,
        "decoded_bytes": decoded,
        "jpeg_bytes": stored,
        "seconds": round(time.perf_counter() - start, 1),
    }
    (args.root / "collection.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"{len(jobs):,} JPEGs in {args.root}: decoded {decoded / 1e9:.1f} GB (sum of H*W*3), "
        f"on disk {stored / 1e9:.2f} GB, {summary['seconds']} s"
    )


if __name__ == "__main__":
    main()
