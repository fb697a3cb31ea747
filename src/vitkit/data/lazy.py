"""Indexable sources read one image at a time: an index in memory, the pixels decoded when a sample is needed.

A lazy source holds, per sample, only its label and where its bytes are (a file path, a row of a memory-mapped
table). Its index lives in numpy arrays, not Python lists, so DataLoader worker processes forked from the main
process share its pages instead of copying them as reference counts change. Decoding happens in `read`, called in
DataLoader workers (vitkit.data.workers); the main process holds no pixels beyond the batches in flight.

`per_sample_steps` and `per_sample_eval` read any source that reads sample by sample (SampleReader) this way:
the training batch of a step (global_batch_indices, then shard) and how each sample is augmented (keyed by seed,
epoch and index) do not depend on the number of workers, so a resumed run reads exactly what the uninterrupted
run read.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
import torch
from torch.utils.data import Dataset

from .batch import Batch
from .batch_order import global_batch_indices, shard, steps_per_epoch
from .decode import ImageDecodeError, decode_image
from .file_batches import decoding_workers
from .source import DEFAULT_READING, EncodedImage, ReadOptions, StepPlan
from .transforms import eval_transform
from .workers import LoaderSteps, loader_batches

TEST_SPLITS = ("test", "validation", "val")  # what a collection may call its evaluation split, in this order
# (n uint8 [C, H, W] images of any sizes, their indices [n]) -> float32 [n, C, h, w]
Preprocess = Callable[[list[torch.Tensor], torch.Tensor], torch.Tensor]


class SampleReader(Protocol):
    """What reading sample by sample needs of a source: its labels, how it is read, and each sample's pixels."""

    @property
    def labels(self) -> torch.Tensor: ...

    @property
    def options(self) -> ReadOptions: ...

    def __len__(self) -> int: ...

    def read(self, index: int, channels: int = 3) -> torch.Tensor: ...

    def name(self, index: int) -> str:
        """Where sample `index` comes from, for messages."""


class LazySource:
    """Samples 0..N-1 of a collection too large to hold decoded: labels, classes and a description in memory,
    images read and decoded by `read(index)`, in DataLoader workers as `options` say.

    Subclasses implement `_bytes(position)` and `_name(position)` for a row of the underlying collection; `select`
    makes a subset without touching the collection.
    """

    reader = "lazy"
    indexable = True
    image_size = None  # known only by decoding

    def __init__(
        self,
        labels: torch.Tensor,
        classes: list[str],
        description: str,
        options: ReadOptions = DEFAULT_READING,
    ) -> None:
        self.labels = labels
        self.classes = classes
        self.description = description
        self.positions = np.arange(len(labels), dtype=np.int64)
        self.options = options

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

    def select(self, indices: torch.Tensor, description: str) -> LazySource:
        subset = copy.copy(self)
        subset.positions = self.positions[indices.numpy()]
        subset.labels = self.labels[indices]
        subset.description = description
        return subset

    def to_device(self, device: torch.device) -> LazySource:
        return self  # decoded per batch, in the workers

    def streams(self, world_size: int) -> None:
        return None

    def train_steps(self, plan: StepPlan) -> LoaderSteps:
        return per_sample_steps(self, plan)

    def eval_batches(
        self, chunks: list[torch.Tensor], img_size: tuple[int, int], in_chans: int, device: torch.device
    ) -> Iterator[Batch]:
        return per_sample_eval(self, chunks, img_size, in_chans, device)

    def encoded_samples(
        self, order: list[int] | None = None
    ) -> Iterator[tuple[int, str, EncodedImage, int | None]]:
        for index in range(len(self)) if order is None else order:
            try:
                data: EncodedImage = self.encoded(index)
            except ImageDecodeError as error:
                data = error
            yield index, self.name(index), data, int(self.labels[index])

    def _bytes(self, position: int) -> bytes:
        raise NotImplementedError

    def _name(self, position: int) -> str:
        raise NotImplementedError


def read_batch(
    source: SampleReader, indices: torch.Tensor, preprocess: Preprocess, shape: tuple[int, ...]
) -> Batch:
    """Decode the samples `indices` one by one, then preprocess those read in one call; `shape` (C, h, w) is an
    output image's shape. The unreadable ones are left out and named in the batch's `skipped`."""
    images, kept, skipped = [], [], []
    # Decoded as the model sees them: grey files stay exact for 1 channel.
    channels = 1 if shape[0] == 1 else 3
    for position, index in enumerate(indices.tolist()):
        try:
            images.append(source.read(index, channels))
        except ImageDecodeError as err:
            skipped.append(str(err))
            continue
        except MemoryError:  # an image within the limits that this machine still cannot hold
            skipped.append(f"{source.name(index)}: out of memory decoding it (expected a smaller image)")
            continue
        kept.append(position)
    chosen = torch.tensor(kept, dtype=torch.int64)
    processed = preprocess(images, indices[chosen]) if images else torch.empty(0, *shape)
    return Batch(processed, source.labels[indices][chosen], indices[chosen], skipped=skipped)


class RankSteps(Dataset):
    """Item k: this rank's share of training step start + k, decoded and augmented (in a worker)."""

    def __init__(self, source: SampleReader, plan: StepPlan, per_epoch: int, start: int) -> None:
        self.source, self.plan, self.per_epoch, self.start = source, plan, per_epoch, start

    def __len__(self) -> int:
        return self.plan.steps - self.start

    def __getitem__(self, k: int) -> Batch:
        plan, step = self.plan, self.start + k
        epoch = step // self.per_epoch
        indices = shard(global_batch_indices(len(self.source), plan.batch_size, plan.seed, step), plan.rank,
                        plan.world_size)  # fmt: skip
        batch = read_batch(self.source, indices, lambda x, i: plan.transform.augment(x, i, epoch), plan.shape)
        batch.step = step
        return batch


def per_sample_steps(source: SampleReader, plan: StepPlan) -> LoaderSteps:
    """Training batches of a source read sample by sample: a DataLoader over RankSteps keeps `workers x prefetch`
    steps in flight."""
    per_epoch = steps_per_epoch(len(source), plan.batch_size)
    return LoaderSteps(lambda start: RankSteps(source, plan, per_epoch, start), per_epoch, source.options,
                       plan.device)  # fmt: skip


class EvalChunks(Dataset):
    """Item k: the samples `chunks[k]` resized (centre crop) to the model's input, in [-1, 1]."""

    def __init__(
        self, source: SampleReader, chunks: list[torch.Tensor], img_size: tuple[int, int], in_chans: int
    ):
        self.source, self.chunks, self.img_size, self.in_chans = source, chunks, img_size, in_chans

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, k: int) -> Batch:
        return read_batch(self.source, self.chunks[k], self._preprocess, (self.in_chans, *self.img_size))

    def _preprocess(self, images: list[torch.Tensor], _: torch.Tensor) -> torch.Tensor:
        return torch.cat([eval_transform(image[None], self.img_size, self.in_chans) for image in images])


def per_sample_eval(
    source: SampleReader,
    chunks: list[torch.Tensor],
    img_size: tuple[int, int],
    in_chans: int,
    device: torch.device,
) -> Iterator[Batch]:
    """Evaluation batches of a source read sample by sample, one a chunk, decoded in DataLoader workers: its
    options' workers, or with none set, `decoding_workers` of them (one batch in flight each), so that decoding
    overlaps the model's forward pass on the chunk before and never runs on the model's threads."""
    options = source.options
    if options.workers == 0 and chunks:
        images, largest = sum(len(c) for c in chunks), max(len(c) for c in chunks)
        options = dataclasses.replace(options, workers=decoding_workers(images, largest), prefetch=1)
    return loader_batches(EvalChunks(source, chunks, img_size, in_chans), len(chunks), options, device)
