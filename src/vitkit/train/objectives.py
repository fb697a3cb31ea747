"""Training objectives: classification, and masked patch prediction (§4.6, B.1.2) for self-supervised pre-training.

The paper pre-trains with sigmoid cross-entropy (B.1, as in BiT's upstream) and fine-tunes with softmax; both
take the same targets, so MixUp/CutMix soft labels and label smoothing compose with either. Masked patch
prediction needs no labels: its model, a ViT wrapped with a [mask] embedding and a prediction head, returns the
loss itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F

from vitkit.collectives import all_reduce_sum, world
from vitkit.data import Source, eval_batches
from vitkit.models.config import to_pair
from vitkit.models.mpp import MaskedPatchPrediction

Forward = Callable[..., torch.Tensor]  # what a step calls: the model, its DDP wrapper or its compiled form
LossFunction = Callable[
    [Forward, torch.Tensor, torch.Tensor], torch.Tensor
]  # (forward, images, labels) -> loss


def smooth_targets(labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
    """Probability targets [B, K]: one-hot (or given soft labels) mixed with the uniform distribution."""
    targets = F.one_hot(labels, num_classes).float() if labels.ndim == 1 else labels.float()
    return targets * (1.0 - smoothing) + smoothing / num_classes if smoothing else targets


def classification_loss(
    logits: torch.Tensor, labels: torch.Tensor, loss: str, smoothing: float
) -> torch.Tensor:
    """Mean over the batch of softmax cross-entropy, or of sigmoid cross-entropy summed over the classes."""
    logits = logits.float()  # the loss in float32 also under bf16 autocast
    targets = smooth_targets(labels, logits.shape[-1], smoothing)
    if loss == "softmax":
        return torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()
    if loss == "sigmoid":
        return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1).mean()
    raise ValueError(f"loss must be 'softmax' or 'sigmoid', got {loss!r}")


def masked_patch_loss(forward: Forward, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The MPP loss of a batch: the wrapper's forward computes it; the labels are unused (self-supervised).

    The corruption draws from torch's global generator, which the engine reseeds every step.
    """
    return forward(images)


@torch.no_grad()
def masked_patch_test_loss(
    model: MaskedPatchPrediction,
    dataset: Source,
    batch_size: int = 500,
    autocast_dtype: torch.dtype | None = None,
) -> tuple[float, list[str]]:
    """(mean MPP loss over a split, the images this rank skipped as unreadable): batch means weighted by their
    images, in eval mode and reproducible: batch i is corrupted with a generator seeded with i. Ranks take every
    world_size-th batch; sums are reduced."""
    rank, world_size = world()
    device = model.mask_token.device
    autocast = (
        torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
    )
    config = model.vit.config
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss x images, images
    skipped: list[str] = []
    was_training = model.training
    model.eval()
    try:
        chunks = torch.arange(len(dataset)).split(batch_size)
        mine = list(range(rank, len(chunks), world_size))
        batches = eval_batches(
            dataset, [chunks[i] for i in mine], to_pair(config.img_size), config.in_chans, device
        )
        for i, batch in zip(mine, batches, strict=True):
            with autocast:
                loss = model(batch.images, generator=torch.Generator(device).manual_seed(i))
            sums[0] += loss.double() * len(batch.indices)
            sums[1] += len(batch.indices)
            skipped += batch.skipped
    finally:
        model.train(was_training)
    all_reduce_sum(sums)
    return (sums[0] / sums[1]).item(), skipped
