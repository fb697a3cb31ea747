"""Class-balanced draws from a training split, reproducible by seed: the paper's fine-tuning on a few labelled
images (`balanced_subset`), and a validation split held out of training for choices (`hold_out`)."""

from __future__ import annotations

import torch

from .source import Source


def check_indexable(dataset: Source, what: str) -> None:
    """A one-line error naming the setting `what` for a source whose images cannot be drawn by index."""
    if not dataset.indexable:
        raise ValueError(
            f"{what} needs an indexable data.source (in memory, folder:, hf:); {dataset.description} is a stream"
        )


def balanced_indices(dataset: Source, size: int, seed: int, what: str) -> torch.Tensor:
    """Sorted indices of `size` images drawn without replacement: size // K of each of the K classes, one more
    for each of the first size % K classes; which ones depends only on `seed`. `what` names the setting in
    errors."""
    num_classes = len(dataset.classes)
    if size < num_classes:
        raise ValueError(
            f"{what} {size} is fewer images than the {num_classes} classes of {dataset.description}: a "
            f"class-balanced draw takes at least one of each ({what}={num_classes} or more)"
        )
    if size > len(dataset):
        raise ValueError(
            f"{what} {size} must be at most the number of training images ({len(dataset)}) of "
            f"{dataset.description}"
        )
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for c in range(num_classes):
        members = torch.nonzero(dataset.labels == c).flatten()
        need = size // num_classes + (c < size % num_classes)
        if len(members) < need:
            raise ValueError(
                f"{what} {size} needs {need} images of class {dataset.classes[c]!r}; "
                f"{dataset.description} has {len(members)}"
            )
        chosen.append(members[torch.randperm(len(members), generator=generator)[:need]])
    return torch.cat(chosen).sort().values


def balanced_subset(dataset: Source, size: int, seed: int = 0) -> Source:
    """A class-balanced subset of `size` images (`balanced_indices`), in their order in `dataset`."""
    check_indexable(dataset, "data.train_subset")
    indices = balanced_indices(dataset, size, seed, "data.train_subset")
    description = f"{dataset.description}; class-balanced subset of {size} images (seed {seed})"
    return dataset.select(indices, description)


def hold_out(dataset: Source, size: int, seed: int = 0) -> tuple[Source, Source]:
    """(the rest, a class-balanced validation split of `size` images): disjoint, together `dataset`, so a
    recipe can be chosen on images it never trains on while the test set stays for the final report."""
    check_indexable(dataset, "data.val_split")
    validation_indices = balanced_indices(dataset, size, seed, "data.val_split")
    keep = torch.ones(len(dataset), dtype=torch.bool)
    keep[validation_indices] = False
    rest = dataset.select(
        keep.nonzero().flatten(),
        f"{dataset.description}; {size} images held out for validation (seed {seed})",
    )
    validation = dataset.select(
        validation_indices,
        f"validation split of {size} images (seed {seed}) held out of {dataset.description}",
    )
    return rest, validation
