"""Indexable sources read one image at a time: an index in memory, the pixels decoded when a sample is needed.

A lazy source holds, per sample, only its label and where its bytes are (a file path, a row of a memory-mapped
table). Its index lives in numpy arrays, not Python lists, so DataLoader worker processes forked from the main
process share its pages instead of copying them as reference counts change. Decoding happens in `read`, called by
the DataLoader workers of vitkit.data.pipeline; the main process holds no pixels beyond the batches in flight.
"""

from __future__ import annotations

import copy
import io

import numpy as np
import torch
from PIL import Image


ON_CORRUPT = ("stop", "skip")


class UnreadableImage(ValueError):
    """A sample whose bytes cannot be read or decoded; `name` says which file or row."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: cannot decode image ({reason})")
        self.name, self.reason = name, reason


def to_rgb(image: Image.Image) -> Image.Image:
    """Any PIL mode as 8-bit RGB: 16/32-bit grey scaled down, transparency composited on white."""
    if image.mode == "I" or image.mode.startswith("I;16"):
        grey = np.asarray(image).astype(np.float64) / 257.0
        image = Image.fromarray(np.clip(np.round(grey), 0, 255).astype(np.uint8), "L")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        image.mode == "P" and "transparency" in image.info
    ):
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return image.convert("RGB")


def decode_image(data: bytes, name: str) -> torch.Tensor:
    """Encoded image bytes as uint8 [C, H, W]: grey images keep one channel, every other mode becomes RGB."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            pixels = np.asarray(image if image.mode == "L" else to_rgb(image))
    except Image.UnidentifiedImageError as err:
        raise UnreadableImage(name, "not an image format Pillow reads") from err
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise UnreadableImage(name, str(err)) from err
    return torch.from_numpy(pixels.copy()).view(*pixels.shape[:2], -1).permute(2, 0, 1).contiguous()


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
        self, labels: torch.Tensor, classes: list[str], source: str, *, workers: int = 0, prefetch: int = 2,
        on_corrupt: str = "stop",
    ) -> None:
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(f"on_corrupt must be one of {ON_CORRUPT}, got {on_corrupt!r}")
        if workers < 0 or prefetch < 1:
            raise ValueError(f"data.workers must be >= 0 and data.prefetch >= 1, got {workers} and {prefetch}")
        self.labels = labels
        self.classes = classes
        self.source = source
        self.positions = np.arange(len(labels), dtype=np.int64)
        self.workers, self.prefetch, self.on_corrupt = workers, prefetch, on_corrupt
        self.skipped: list[str] = []  # "name: cannot decode image (reason)" of each image skipped (main process)

    def __len__(self) -> int:
        return len(self.labels)

    def read(self, index: int) -> torch.Tensor:
        """Sample `index` as uint8 [C, H, W] (C = 1 for grey images, else 3); UnreadableImage if it cannot be."""
        position = int(self.positions[index])
        name = self._name(position)
        try:
            data = self._bytes(position)
        except OSError as err:
            raise UnreadableImage(name, str(err)) from err
        return decode_image(data, name)

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
