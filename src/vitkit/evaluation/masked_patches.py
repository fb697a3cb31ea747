"""The masked patch prediction objective (§4.6, B.1.2) measured on a split: what an MPP run reports in place of
accuracy, for it trains no classifier."""

from __future__ import annotations

import torch
from torch import nn

from vitkit.data import Batch, Source
from vitkit.evaluation.loop import evaluation_sums
from vitkit.precision import Precision


def masked_patch_loss(
    model: nn.Module,
    dataset: Source,
    *,
    batch_size: int = 500,
    precision: Precision | None = None,
) -> tuple[float, list[str]]:
    """(mean MPP loss over a split, the images this rank left out as unreadable): batch means weighted by their
    images, reproducible: batch i is corrupted with a generator seeded with i, whichever rank measures it."""

    def measure(number: int, batch: Batch) -> torch.Tensor:
        """[loss x images, images] of one batch."""
        images = batch.images
        if not len(images):  # an empty batch that keeps the ranks' calls equal
            return torch.zeros(2, dtype=torch.float64, device=images.device)
        loss = model(images, generator=torch.Generator(images.device).manual_seed(number))
        count = torch.full((), len(images), dtype=torch.float64, device=images.device)
        return torch.stack([loss.double() * count, count])

    sums, skipped = evaluation_sums(model, dataset, measure, 2, batch_size=batch_size, precision=precision)
    return (sums[0] / sums[1]).item(), skipped
