"""Class-balanced draws from a training split, reproducible by seed: the paper's fine-tuning on a few labelled
images (`balanced_subset`), and a validation split held out of training for choices (`hold_out`)."""

from __future__ import annotations

import torch

from .lazy import LazySource
from .pipeline import Source
from .shards import ShardSource
from .sources import ImageDataset


def indexable(dataset: Source, what: str) -> ImageDataset | LazySource:
    """`dataset`, whose images can be drawn by index; a one-line error naming the setting `what` for a stream."""
    if isinstance(dataset, ShardSource):
        raise ValueError(
            f"{what} needs an indexable data.source (in memory, folder:, hf:); {dataset.source} is a stream"
        )
    return dataset


def balanced_indices(dataset: ImageDataset | LazySource, size: int, seed: int, what: str) -> torch.Tensor:
    """Sorted indices of `size` images drawn without replacement: size // K of each of the K classes, one more
    for each of the first size % K classes; which ones depends only on `seed`. `what` names the setting in
    errors."""
    num_classes = len(dataset.classes)
    if not num_classes <= size <= len(dataset):
        raise ValueError(
            f"{what} {size} must be between the number of classes ({num_classes}) and the number of "
            f"training images ({len(dataset)}) of {dataset.source}"
        )
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for c in range(num_classes):
        members = torch.nonzero(dataset.labels == c).flatten()
        need = size // num_classes + (c < size % num_classes)
        if len(members) < need:
            raise ValueError(
                f"{what} {size} needs {need} images of class {dataset.classes[c]!r}; "
                f"{dataset.source} has {len(members)}"
            )
        chosen.append(members[torch.randperm(len(members), generator=generator)[:need]])
    return torch.cat(chosen).sort().values


def balanced_subset(dataset: Source, size: int, seed: int = 0) -> ImageDataset | LazySource:
    """A class-balanced subset of `size` images (`balanced_indices`), in their order in `dataset`."""
    dataset = indexable(dataset, "data.train_subset")
    indices = balanced_indices(dataset, size, seed, "data.train_subset")
    source = f"{dataset.source}; class-balanced subset of {size} images (seed {seed})"
    return dataset.select(indices, source)


def hold_out(
    dataset: Source, size: int, seed: int = 0
) -> tuple[ImageDataset | LazySource, ImageDataset | LazySource]:
    """(the rest, a class-balanced validation split of `size` images): disjoint, together `dataset`, so a
    recipe can be chosen on images it never trains on while the test set stays for the final report."""
    dataset = indexable(dataset, "data.val_split")
    held = balanced_indices(dataset, size, seed, "data.val_split")
    keep = torch.ones(len(dataset), dtype=torch.bool)
    keep[held] = False
    rest = dataset.select(
        keep.nonzero().flatten(), f"{dataset.source}; {size} images held out for validation (seed {seed})"
    )
    validation = dataset.select(
        held, f"validation split of {size} images (seed {seed}) held out of {dataset.source}"
    )
    return rest, validation
