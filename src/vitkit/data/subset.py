"""A class-balanced training subset: the paper's fine-tuning on a few labelled images, reproducible by seed."""

from __future__ import annotations

import torch

from .lazy import LazySource
from .sources import ImageDataset


def balanced_subset(dataset: ImageDataset | LazySource, size: int, seed: int = 0) -> ImageDataset | LazySource:
    """`size` images drawn without replacement: size // K of each of the K classes, one more for each of the first
    size % K classes; which ones depends only on `seed`. The images keep their order in `dataset`."""
    num_classes = len(dataset.classes)
    if not num_classes <= size <= len(dataset):
        raise ValueError(
            f"data.train_subset {size} must be between the number of classes ({num_classes}) and the number of "
            f"training images ({len(dataset)}) of {dataset.source}"
        )
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for c in range(num_classes):
        members = torch.nonzero(dataset.labels == c).flatten()
        need = size // num_classes + (c < size % num_classes)
        if len(members) < need:
            raise ValueError(
                f"data.train_subset {size} needs {need} images of class {dataset.classes[c]!r}; "
                f"{dataset.source} has {len(members)}"
            )
        chosen.append(members[torch.randperm(len(members), generator=generator)[:need]])
    indices = torch.cat(chosen).sort().values
    source = f"{dataset.source}; class-balanced subset of {size} images (seed {seed})"
    return dataset.select(indices, source)
