"""Indexable sources read one image at a time: an index in memory, the pixels decoded when a sample is needed.

A lazy source holds, per sample, only its label and where its bytes are (a file path, a row of a memory-mapped
table). Its index lives in numpy arrays, not Python lists, so DataLoader worker processes forked from the main
process share its pages instead of copying them as reference counts change. Decoding happens in `read`, called by
the DataLoader workers of vitkit.data.pipeline; the main process holds no pixels beyond the batches in flight.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from .decode import ImageDecodeError, decode_image

ON_CORRUPT = ("stop", "skip")
TEST_SPLITS = ("test", "validation", "val")  # what a collection may call its evaluation split, in this order


def check_reading(workers: int, prefetch: int, on_corrupt: str) -> None:
    """The options of how any lazy or streamed source is read, each in its range."""
    if on_corrupt not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be one of {ON_CORRUPT}, got {on_corrupt!r}")
    if workers < 0 or prefetch < 1:
        raise ValueError(f"data.workers must be >= 0 and data.prefetch >= 1, got {workers} and {prefetch}")


class LazySource:
    """Samples 0..N-1 of a collection too large to hold decoded: labels, classes and a description in memory,
    images read and decoded by `read(index)`.

    `workers` and `prefetch` say how vitkit.data.pipeline reads it (DataLoader worker processes, batches queued
    per worker); `on_corrupt` whether an unreadable image stops the run ('stop') or is skipped and listed in
    `skipped` ('skip'). Subclasses implement `_bytes(position)` and `_name(position)` for a row of the
    underlying collection; `select` makes a subset without touching the collection.
    """

    reader = "lazy"

    def __init__(
        self,
        labels: torch.Tensor,
        classes: list[str],
        source: str,
        *,
        workers: int = 0,
        prefetch: int = 2,
        on_corrupt: str = "stop",
    ) -> None:
        check_reading(workers, prefetch, on_corrupt)
        self.labels = labels
        self.classes = classes
        self.source = source
        self.positions = np.arange(len(labels), dtype=np.int64)
        self.workers, self.prefetch, self.on_corrupt = workers, prefetch, on_corrupt
        self.skipped: list[str] = []  # the one-line error of each image skipped so far (main process)

    def __len__(self) -> int:
        return len(self.labels)

    def encoded(self, index: int) -> bytes:
        """Sample `index`'s encoded bytes (the file's, the row's); ImageDecodeError naming it if unreadable."""
        position = int(self.positions[index])
        try:
            return self._bytes(position)
        except OSError as err:
            raise ImageDecodeError(f"{self._name(position)}: cannot read ({err.strerror or err})") from None

    def read(self, index: int, channels: int = 3) -> torch.Tensor:
        """Sample `index` as uint8 [channels, H, W] by vitkit.data.decode's rule; ImageDecodeError (naming the
        file or row) if it cannot be read or decoded."""
        return decode_image(self.encoded(index), name=self.name(index), channels=channels)

    def name(self, index: int) -> str:
        """Where sample `index` comes from (path or row), for messages."""
        return self._name(int(self.positions[index]))

    def select(self, indices: torch.Tensor, source: str) -> LazySource:
        """The samples `indices` (in that order) as a source of their own, described by `source`."""
        subset = copy.copy(self)
        subset.positions = self.positions[indices.numpy()]
        subset.labels = self.labels[indices]
        subset.source = source
        subset.skipped = []
        return subset

    def _bytes(self, position: int) -> bytes:
        raise NotImplementedError

    def _name(self, position: int) -> str:
        raise NotImplementedError
