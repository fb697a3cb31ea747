"""Image files decoded and preprocessed for inference off the model's thread, overlapped with its forward passes.

`predict` reads a list of files in batches: item k of a DataLoader is batch k, decoded with Pillow and resized by
`eval_transform` in a worker process (one torch thread each, as DataLoader workers run), so the pixels are exactly
those of `eval_transform` in the main process, while the main process runs the model on the batch before. At most
`workers x prefetch` batches are in flight; a list that fits one batch is read in the main process, under one torch
thread (a float resize on the model's thread pool costs ~10x more on a loaded machine than on one thread).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch
from torch.utils.data import Dataset

from .decode import ImageDecodeError, decode_image
from .source import ReadOptions
from .transforms import MeanStd, eval_transform
from .workers import loader, next_batch, start_stream, stop_workers

MAX_WORKERS = 2  # decoding a batch takes a fraction of its forward pass: two workers keep ahead of it


@dataclass
class FileBatch:
    """Batch k of the files: the pixels of those that decoded, their positions in the list, and the one-line
    errors of those that did not (by position)."""

    pixels: torch.Tensor
    positions: list[int]
    errors: dict[int, str] = field(default_factory=dict)


class FileChunks(Dataset):
    """Item k: files[k * batch_size : (k + 1) * batch_size] decoded and resized to `img_size`, in [-1, 1] or
    normalised with the weights' `mean_std` (vitkit.data.transforms.eval_transform)."""

    def __init__(
        self,
        files: list[Path],
        batch_size: int,
        img_size: tuple[int, int],
        in_chans: int,
        max_pixels: int | None = None,
        mean_std: MeanStd = None,
    ) -> None:
        self.files, self.batch_size, self.img_size, self.in_chans = files, batch_size, img_size, in_chans
        self.max_pixels, self.mean_std = max_pixels, mean_std

    def __len__(self) -> int:
        return -(-len(self.files) // self.batch_size)

    def __getitem__(self, k: int) -> FileBatch:
        start = k * self.batch_size
        images, positions, errors = [], [], {}
        for position in range(start, min(start + self.batch_size, len(self.files))):
            try:
                pixels = decode_image(self.files[position], max_pixels=self.max_pixels)
            except ImageDecodeError as error:
                errors[position] = str(error)
                continue
            images.append(eval_transform(pixels[None], self.img_size, self.in_chans, self.mean_std))
            positions.append(position)
        stacked = torch.cat(images) if images else torch.empty(0, self.in_chans, *self.img_size)
        return FileBatch(stacked, positions, errors)


def decoding_workers(files: int, batch_size: int) -> int:
    """Worker processes for `files` files in batches of `batch_size`: none for one batch (nothing to overlap),
    else up to MAX_WORKERS, and never more than the CPUs less one for the model."""
    if files <= batch_size:
        return 0
    return max(1, min(MAX_WORKERS, (os.cpu_count() or 1) - 1))


def file_batches(chunks: FileChunks, workers: int | None = None) -> Iterator[FileBatch]:
    """The batches of `chunks` in order, decoded by `workers` processes (default `decoding_workers`) ahead of
    the caller's use of the batch before."""
    if workers is None:
        workers = decoding_workers(len(chunks.files), chunks.batch_size)
    if workers == 0:
        for k in range(len(chunks)):
            with one_torch_thread():
                batch = chunks[k]
            yield batch
        return
    stream = start_stream(loader(chunks, ReadOptions(workers=workers, prefetch=2), pin_memory=False))
    try:
        for _ in range(len(chunks)):
            yield cast(FileBatch, next_batch(stream))  # item k of FileChunks
    finally:
        stop_workers(stream)


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch's intra-op threads set to one for the block (the main thread's own preprocessing), then restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
