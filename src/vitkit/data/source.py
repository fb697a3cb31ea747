"""What vitkit asks of a split of labelled images, whatever holds it: the Source protocol, the options of how it is
read (ReadOptions), and what training asks it for (StepPlan, answered by a StepReader).

The pipeline, subsets, packing and the trainer call these methods and never ask which class a source is, so a
source vitkit does not ship (a database, another file format) trains and evaluates like the built-in ones:
in memory (vitkit.data.in_memory), per sample (vitkit.data.lazy: folders, Hugging Face datasets) and streamed
(vitkit.data.shards). A source read sample by sample implements its training and evaluation reading with
vitkit.data.lazy's `per_sample_steps` and `per_sample_eval`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from .batch import Batch
from .decode import ImageDecodeError
from .transforms import TrainTransform

ON_CORRUPT = ("stop", "skip")
EncodedImage = (
    bytes | ImageDecodeError | None
)  # a sample's encoded image; the error of one unreadable; missing


@dataclass(frozen=True)
class ReadOptions:
    """How a source read per sample or streamed is read: by `workers` DataLoader worker processes (0: in the
    main process), each keeping `prefetch` batches queued; an unreadable image stops the run ('stop') or is
    skipped ('skip'), named in the batch that left it out. In-memory sources are decoded already and ignore them."""

    on_corrupt: str = "stop"
    workers: int = 0
    prefetch: int = 2

    def __post_init__(self) -> None:
        if self.on_corrupt not in ON_CORRUPT:
            raise ValueError(f"on_corrupt must be one of {ON_CORRUPT}, got {self.on_corrupt!r}")
        if self.workers < 0 or self.prefetch < 1:
            raise ValueError(
                f"data.workers must be >= 0 and data.prefetch >= 1, got {self.workers} and {self.prefetch}"
            )


DEFAULT_READING = ReadOptions()  # in the main process, 2 batches queued, an unreadable image stops the run


@dataclass(frozen=True)
class StepPlan:
    """What training asks of a source: rank `rank`'s share (of `world_size`) of global batches of `batch_size`,
    for steps 0..steps-1 in the order keyed by `seed`, augmented by `transform`, for a model on `device`."""

    transform: TrainTransform
    batch_size: int
    seed: int
    steps: int
    device: torch.device
    rank: int = 0
    world_size: int = 1

    @property
    def shape(self) -> tuple[int, ...]:
        """An augmented image's shape (C, h, w)."""
        return (self.transform.in_chans or 3, *self.transform.img_size)


class StepReader(Protocol):
    """A source's batches of training steps: called with consecutive steps (any other step restarts the reading);
    `per_epoch` steps make an epoch. Each batch names the images it left out as unreadable in `skipped`."""

    @property
    def per_epoch(self) -> int: ...

    def __call__(self, step: int) -> Batch: ...

    def close(self) -> None:
        """Stop any worker processes and free what is held for the steps to come."""


class Source(Protocol):
    """A split of labelled images: samples 0..len-1, each of one of `classes`.

    A source is `indexable` when any sample can be read by its index (`labels`, `read`, `select`: subsets,
    validation splits, few-shot draws); a stream is read front to back only, and those raise a one-line error.
    """

    @property
    def classes(self) -> list[str]: ...

    @property
    def description(self) -> str:
        """Which data this is, exactly (logs, report.json's train_data / test_data)."""

    @property
    def reader(self) -> str:
        """How its images are read (`vitkit data info`)."""

    @property
    def options(self) -> ReadOptions: ...

    @property
    def indexable(self) -> bool: ...

    @property
    def labels(self) -> torch.Tensor:
        """int64 [len]: each sample's class index."""

    @property
    def image_size(self) -> tuple[int, int] | None:
        """(width, height) of every image when known without reading one (decoded already), else None."""

    def __len__(self) -> int: ...

    def read(self, index: int, channels: int = 3) -> torch.Tensor:
        """Sample `index` as uint8 [C, H, W]; ImageDecodeError (naming it) if it cannot be read."""

    def select(self, indices: torch.Tensor, description: str) -> Source:
        """The samples `indices` (in that order) as a source of their own, described by `description`."""

    def to_device(self, device: torch.device) -> Source:
        """This source for training on `device`: itself, or a copy held there when batches are cut there."""

    def streams(self, world_size: int) -> int | None:
        """How many streams its training batches are read as when they depend on it (a resume must read as
        many); None when any number of ranks and workers reads the same batches."""

    def train_steps(self, plan: StepPlan) -> StepReader:
        """Its batches for training as `plan` asks (vitkit.data.pipeline.TrainBatches calls it)."""

    def eval_batches(
        self, chunks: list[torch.Tensor], img_size: tuple[int, int], in_chans: int, device: torch.device
    ) -> Iterator[Batch]:
        """One batch a chunk of sample indices, in chunk order, each image resized (centre crop) to `img_size`
        with `in_chans` channels, in [-1, 1] (vitkit.data.transforms.eval_transform)."""

    def encoded_samples(
        self, order: list[int] | None = None
    ) -> Iterator[tuple[int, str, EncodedImage, int | None]]:
        """(index, name, encoded image, label) of every sample, in index order (or `order`, when indexable),
        without decoding what is encoded: what packing writes and `data info` measures."""
