#!/usr/bin/env python3
"""What keying the fast path's cached features by each photo's content costs: vitkit.training.features.image_keys
(the sha256 of every file's bytes) beside keys made from each file's path, size and modification time (one
stat a file: what a key that misses a rewrite keeping both would cost), on a folder of small JPEG photos,
in alternated rounds (the median of the per-round ratios, with their range). The files are in the page cache
after the first round: the figures are of hashing, not of a cold disk.

    python benchmarks/feature_keys_cost.py --photos 1000 --rounds 9
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vitkit.data import FolderSource
from vitkit.training.features import image_keys


def write_photos(root: Path, count: int, size: tuple[int, int]) -> int:
    """`count` JPEGs (quality 90) of smooth random colour fields in two classes; their total bytes."""
    rng = np.random.default_rng(0)
    total = 0
    for index in range(count):
        folder = root / "train" / f"class{index % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        coarse = rng.integers(0, 256, (size[1] // 16, size[0] // 16, 3), dtype=np.uint8)
        image = Image.fromarray(coarse).resize(size, Image.BICUBIC)
        noisy = np.asarray(image, dtype=np.int16) + rng.integers(-12, 13, (size[1], size[0], 3))
        path = folder / f"{index:05d}.jpg"
        Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(path, quality=90)
        total += path.stat().st_size
    return total


def stat_keys(source: FolderSource) -> list[str]:
    """path|size|mtime of each file."""
    keys = []
    for index in range(len(source)):
        path = os.path.abspath(source.path(index))
        info = os.stat(path)
        keys.append(f"{os.fsdecode(path)}|{info.st_size}|{info.st_mtime_ns}")
    return keys


def timed(keys, source: FolderSource) -> float:
    start = time.perf_counter()
    keys(source)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--photos", type=int, default=1000)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        total = write_photos(root, args.photos, (args.width, args.height))
        source = FolderSource(root, "train")
        content, stats = [], []
        for _ in range(args.rounds):
            content.append(timed(image_keys, source))
            stats.append(timed(stat_keys, source))
        ratios = [c / s for c, s in zip(content, stats, strict=True)]
    print(
        f"<!-- torch {torch.__version__}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
        f"load average {os.getloadavg()[0]:.1f} -->"
    )
    print(
        f"{args.photos} JPEGs of {args.width}x{args.height}, {total / args.photos / 1024:.1f} KiB each "
        f"({total / 2**20:.1f} MiB), {args.rounds} alternated rounds\n"
    )
    print("| keys | median (s) | range (s) | per photo (ms) |")
    print("|---|---|---|---|")
    for name, times in (("sha256 of the bytes (image_keys)", content), ("path, size, mtime (a stat)", stats)):
        median = statistics.median(times)
        print(
            f"| {name} | {median:.3f} | {min(times):.3f}-{max(times):.3f} | {median / args.photos * 1e3:.3f} |"
        )
    print(
        f"\ncontent / stat: median {statistics.median(ratios):.1f}x (range {min(ratios):.1f}-{max(ratios):.1f}x)"
    )


if __name__ == "__main__":
    main()
