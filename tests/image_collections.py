"""Tiny image collections written to disk for the data tests: the synthetic dataset as PNG class folders, and
those packed as WebDataset shards or a Hugging Face dataset."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image

from vitkit.data import FolderSource, ImageDataset, LazySource, TrainBatches
from vitkit.data.builtin import make_synthetic
from vitkit.data.pack import pack

SIZES = {"train": 60, "test": 20}


def write_folder(root: Path, sizes: dict[str, int] = SIZES) -> Path:
    """The first `sizes[split]` synthetic images of each split as root/<split>/<class>/<index>.png (lossless)."""
    for split, count in sizes.items():
        data = make_synthetic(split)
        for i in range(count):
            directory = root / split / data.classes[int(data.labels[i])]
            directory.mkdir(parents=True, exist_ok=True)
            Image.fromarray(data.images[i].permute(1, 2, 0).numpy()).save(directory / f"{i:05d}.png")
    return root


def in_memory(source: LazySource, channels: int) -> ImageDataset:
    """The same images (decoded to `channels`, as the pipeline decodes for a model with that many), labels and
    order held in memory: what a lazy source must reproduce exactly."""
    images = torch.stack([source.read(i, channels) for i in range(len(source))])
    return ImageDataset(
        images, source.labels.clone(), list(source.classes), f"in memory: {source.description}"
    )


def write_packed(folder: Path, out: Path, fmt: str, shard_images: int = 1000) -> Path:
    """The folder's splits packed as `fmt` ('wds' or 'hf') with `vitkit data pack`'s writer."""
    pack({split: FolderSource(folder, split) for split in ("train", "test")}, out, fmt, shard_images)
    return out


def take_steps(source, transform, *, seed=0, start=0, stop=10, rank=0, world_size=1, batch_size=12) -> list:
    """The batches of steps start..stop-1 on `rank`, as the engine asks for them (on the CPU)."""
    batches = TrainBatches(source, transform, batch_size, seed, stop, torch.device("cpu"), rank, world_size)
    try:
        return [batches(step) for step in range(start, stop)]
    finally:
        batches.close()


def write_small_shards(root: Path) -> Path:
    """The folder of write_folder packed as WebDataset shards of 5 images (12 train shards) under root/wds."""
    return write_packed(write_folder(root / "folder"), root / "wds", "wds", shard_images=5)
