"""Are two classifiers' accuracies on the same test set different? The exact McNemar test.

Only the images exactly one of the two gets right carry information: under the hypothesis that both are equally
accurate, each of those is the first's with probability 1/2, so their split is a binomial draw and the two-sided
p-value is the probability of a split at least as uneven (McNemar 1947, exact form; scipy's
`binomtest(only_first, only_first + only_second).pvalue`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from vitkit.data import ImageDataset, eval_transform
from vitkit.models import as_model
from vitkit.precision import Precision


@dataclass(frozen=True)
class PairedResult:
    """Two classifiers on the same images: how many each alone got right, and the exact McNemar p-value."""

    images: int
    first_top1: float
    second_top1: float
    only_first: int
    only_second: int
    p_value: float

    def describe(self) -> str:
        return (
            f"{100 * self.first_top1:.2f}% against {100 * self.second_top1:.2f}% on {self.images} images "
            f"(only the first right: {self.only_first}, only the second: {self.only_second}; "
            f"exact McNemar p = {self.p_value:.3g})"
        )


def mcnemar_p_value(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar p-value of a discordant split (1.0 when there is none)."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    k = min(only_first, only_second)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_test(first: torch.Tensor, second: torch.Tensor, labels: torch.Tensor) -> PairedResult:
    """Compare two classifiers' top-1 predictions [N] on the same labelled images [N]."""
    if not first.shape == second.shape == labels.shape or labels.ndim != 1:
        raise ValueError(
            f"paired_test needs three [N] tensors of one length, got {tuple(first.shape)}, "
            f"{tuple(second.shape)} and {tuple(labels.shape)}"
        )
    a, b = first == labels, second == labels
    only_first, only_second = int((a & ~b).sum()), int((~a & b).sum())
    return PairedResult(
        images=len(labels),
        first_top1=a.float().mean().item(),
        second_top1=b.float().mean().item(),
        only_first=only_first,
        only_second=only_second,
        p_value=mcnemar_p_value(only_first, only_second),
    )


@torch.no_grad()
def predictions(
    model: nn.Module, dataset: ImageDataset, precision: Precision, batch_size: int = 500
) -> torch.Tensor:
    """The top-1 class [N] of every image of an in-memory split, with the evaluation preprocessing at the model's
    own resolution (so a 28x28 run and its 56x56 fine-tuning compare directly), inferred in `precision`."""
    config = as_model(model).config
    top1 = []
    with precision.inference(model) as inferred:
        for chunk in torch.arange(len(dataset)).split(batch_size):
            images = eval_transform(
                dataset.images[chunk].to(precision.device), config.img_size, config.in_chans, config.mean_std
            )
            top1.append(inferred(images).argmax(-1).cpu())
    return torch.cat(top1)
