"""Top-1 / top-5 accuracy, mean loss and the confusion matrix of a classifier on a split of any source."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.collectives import all_reduce_sum, world
from vitkit.data import Source, eval_batches
from vitkit.models import as_model
from vitkit.models.config import to_pair


@dataclass
class Accuracy:
    """Evaluation result; `confusion[i, j]` counts images of class i predicted as class j."""

    top1: float
    top5: float
    loss: float
    confusion: torch.Tensor
    count: int

    def as_dict(self, prefix: str = "test_") -> dict[str, float]:
        return {f"{prefix}top1": self.top1, f"{prefix}top5": self.top5, f"{prefix}loss": self.loss}


@torch.no_grad()
def evaluate(
    model: nn.Module,
    dataset: Source,
    *,
    batch_size: int = 500,
    device: torch.device | str | None = None,
    autocast_dtype: torch.dtype | None = None,
) -> Accuracy:
    """Evaluate with the paper's preprocessing (resize, [-1, 1]); each rank takes a slice, counts are summed.

    Images a lazy source skips as unreadable (data.on_corrupt='skip') are left out of the counts."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    num_classes = len(dataset.classes)
    config = as_model(model).config  # `model` may be compiled
    model_classes = config.num_classes
    if model_classes != num_classes:
        raise ValueError(
            f"the model has {model_classes} classes, the dataset {dataset.source} has {num_classes}"
        )
    rank, world_size = world()
    indices = torch.arange(len(dataset)).tensor_split(world_size)[rank]
    img_size, in_chans = to_pair(config.img_size), config.in_chans
    autocast = (
        torch.autocast(device.type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    k = min(5, num_classes)
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64, device=device)
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, top-5 hits
    was_training = model.training
    model.eval()
    try:
        chunks = list(indices.split(batch_size))
        # The same number of forward calls on every rank (FSDP gathers weights in each); the extra ones are empty.
        chunks += [indices[:0]] * (math.ceil(math.ceil(len(dataset) / world_size) / batch_size) - len(chunks))
        for batch in eval_batches(dataset, chunks, img_size, in_chans, device):
            x, y = batch.images, batch.labels
            with autocast:
                logits = model(x).float()
            sums[0] += F.cross_entropy(logits, y, reduction="sum").double()
            sums[1] += (logits.topk(k, dim=-1).indices == y[:, None]).any(-1).sum()
            confusion += torch.bincount(y * num_classes + logits.argmax(-1), minlength=num_classes**2).view(
                num_classes, num_classes
            )
    finally:
        model.train(was_training)
    all_reduce_sum(confusion)
    all_reduce_sum(sums)
    count = int(confusion.sum())
    return Accuracy(
        top1=confusion.diagonal().sum().item() / count,
        top5=sums[1].item() / count,
        loss=sums[0].item() / count,
        confusion=confusion.cpu(),
        count=count,
    )
