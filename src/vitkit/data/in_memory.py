"""A split held whole in memory as uint8 tensors: decoding once keeps the training loop free of file I/O.

Training batches are sliced and augmented on the model's device (the fast path). On a GPU, where a step of a small
model costs less than launching the augmentation's kernels, a whole epoch of a rank's samples is augmented at once
when it fits (EPOCH_MEMORY_SHARE of the free memory) and each step takes its slice: the same pixels, since the
augmentation is per sample (tests/data/test_pipeline.py).
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from PIL import Image

from .batch import Batch
from .batch_order import epoch_shard, global_batch_indices, shard, steps_per_epoch
from .source import EncodedImage, ReadOptions, StepPlan
from .transforms import eval_transform

EPOCH_MEMORY_SHARE = 0.25  # of a GPU's free memory, for a whole augmented epoch of an in-memory source
EPOCH_CHUNK = 8192  # samples augmented at once when augmenting a whole epoch (bounds the transient memory)


@dataclass
class ImageDataset:
    """A whole split in memory (vitkit.data.source.Source): `description` says which data it is."""

    images: torch.Tensor  # uint8 [N, C, H, W]
    labels: torch.Tensor  # int64 [N]
    classes: list[str]
    description: str
    reader = "in memory (uint8 tensor)"
    options = ReadOptions()  # decoded already: nothing to read
    indexable = True

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError(
                f"images must be uint8 [N, C, H, W], got {self.images.dtype} {tuple(self.images.shape)}"
            )
        if self.labels.dtype != torch.int64 or self.labels.shape != (len(self.images),):
            raise ValueError(
                f"labels must be int64 [{len(self.images)}], "
                f"got {self.labels.dtype} {tuple(self.labels.shape)}"
            )

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def image_size(self) -> tuple[int, int]:
        return self.images.shape[-1], self.images.shape[-2]

    def read(self, index: int, channels: int = 3) -> torch.Tensor:
        """Sample `index` as uint8 [C, H, W] with the channels it was loaded with."""
        return self.images[index]

    def select(self, indices: torch.Tensor, description: str) -> ImageDataset:
        return ImageDataset(self.images[indices], self.labels[indices], self.classes, description)

    def to_device(self, device: torch.device) -> ImageDataset:
        """Moved to a CUDA device when it takes at most a quarter of the free memory there, so its
        batches are sliced there and never cross the bus; itself on a CPU or when too large."""
        if device.type != "cuda":
            return self
        size = self.images.nbytes + self.labels.nbytes
        if size > torch.cuda.mem_get_info(device)[0] // 4:
            return self
        return dataclasses.replace(self, images=self.images.to(device), labels=self.labels.to(device))

    def streams(self, world_size: int) -> None:
        return None

    def train_steps(self, plan: StepPlan) -> MemorySteps:
        return MemorySteps(self, plan)

    def eval_batches(
        self, chunks: list[torch.Tensor], img_size: tuple[int, int], in_chans: int, device: torch.device
    ) -> Iterator[Batch]:
        for chunk in chunks:
            images = eval_transform(self.images[chunk].to(device), img_size, in_chans)
            yield Batch(images, self.labels[chunk].to(device), chunk)

    def encoded_samples(
        self, order: list[int] | None = None
    ) -> Iterator[tuple[int, str, EncodedImage, int | None]]:
        """Each image as PNG (lossless: a packed copy trains bitwise like this one)."""
        for index in range(len(self)) if order is None else order:
            yield (
                index,
                f"{self.description} image {index}",
                png_bytes(self.images[index]),
                int(self.labels[index]),
            )


def png_bytes(image: torch.Tensor) -> bytes:
    """A uint8 [C, H, W] image as PNG."""
    array = image.cpu().permute(1, 2, 0).numpy()
    buffer = io.BytesIO()
    Image.fromarray(array[..., 0] if array.shape[2] == 1 else array).save(buffer, "png")
    return buffer.getvalue()


class MemorySteps:
    """A rank's share of each training step of an in-memory source, sliced and augmented on the images' device,
    or sliced from a whole augmented epoch when one fits (`fits_whole_epochs`)."""

    def __init__(self, source: ImageDataset, plan: StepPlan) -> None:
        self.source, self.plan = source, plan
        self.per_epoch = steps_per_epoch(len(source), plan.batch_size)
        self.whole_epochs = fits_whole_epochs(source, plan.shape)
        self._epoch: tuple[int, Batch] | None = None  # (epoch, this rank's augmented samples, in step order)

    def __call__(self, step: int) -> Batch:
        source, plan = self.source, self.plan
        epoch, position = divmod(step, self.per_epoch)
        if self.whole_epochs:
            if self._epoch is None or self._epoch[0] != epoch:
                self._epoch = None  # one epoch in memory at a time
                self._epoch = epoch, self._augment_epoch(epoch)
            share = plan.batch_size // plan.world_size
            window = slice(position * share, (position + 1) * share)
            whole = self._epoch[1]
            return Batch(whole.images[window], whole.labels[window], whole.indices[window], step)
        order = global_batch_indices(len(source), plan.batch_size, plan.seed, step, source.images.device)
        indices = shard(order, plan.rank, plan.world_size)
        images = plan.transform.augment(source.images[indices].to(plan.device), indices, epoch)
        return Batch(images, source.labels[indices].to(plan.device), indices, step)

    def _augment_epoch(self, epoch: int) -> Batch:
        """This rank's share of every step of `epoch`, in step order, augmented EPOCH_CHUNK samples at a time."""
        source, plan = self.source, self.plan
        indices = epoch_shard(len(source), plan.batch_size, plan.seed, epoch, plan.rank, plan.world_size,
                              source.images.device)  # fmt: skip
        images = torch.cat(
            [
                plan.transform.augment(source.images[chunk], chunk, epoch)
                for chunk in indices.split(EPOCH_CHUNK)
            ]
        )
        return Batch(images, source.labels[indices], indices)

    def close(self) -> None:
        """Free the augmented epoch."""
        self._epoch = None


def fits_whole_epochs(source: ImageDataset, shape: tuple[int, ...]) -> bool:
    """Whether training steps slice a whole augmented epoch: images on a GPU, the epoch of float32 images of
    `shape` fitting in EPOCH_MEMORY_SHARE of its free memory."""
    if source.images.device.type != "cuda":
        return False
    epoch_bytes = len(source) * math.prod(shape) * 4
    return epoch_bytes <= torch.cuda.mem_get_info(source.images.device)[0] * EPOCH_MEMORY_SHARE
