"""Top-1 / top-5 accuracy, mean loss and the confusion matrix of a classifier on a split of any source."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.data import Batch, Source
from vitkit.evaluation.loop import evaluation_sums
from vitkit.models import as_model
from vitkit.precision import Precision


@dataclass
class Accuracy:
    """Evaluation result; `confusion[i, j]` counts images of class i predicted as class j; `skipped` names the
    images this rank left out as unreadable (data.on_corrupt='skip'), as its batches named them."""

    top1: float
    top5: float
    loss: float
    confusion: torch.Tensor
    count: int
    skipped: list[str] = field(default_factory=list)

    def as_dict(self, prefix: str = "test_") -> dict[str, float]:
        return {f"{prefix}top1": self.top1, f"{prefix}top5": self.top5, f"{prefix}loss": self.loss}


def evaluate_model(
    model: nn.Module,
    dataset: Source,
    *,
    batch_size: int = 500,
    precision: Precision | None = None,
    progress: str | None = None,
) -> Accuracy:
    """Evaluate on every image of `dataset` (each rank a share, the counts summed) under `precision` (default
    float32), with a progress bar of that name when `progress` is given. Images a lazy source skips as unreadable
    (data.on_corrupt='skip') are left out of the counts."""
    num_classes = len(dataset.classes)
    model_classes = as_model(model).config.num_classes  # `model` may be compiled or wrapped
    if model_classes != num_classes:
        raise ValueError(
            f"the model has {model_classes} classes, the dataset {dataset.description} has {num_classes}"
        )
    k = min(5, num_classes)

    def measure(_: int, batch: Batch) -> torch.Tensor:
        """[confusion (K x K, flattened), loss sum, top-5 hits] of one batch."""
        logits, y = model(batch.images).float(), batch.labels
        confusion = torch.bincount(y * num_classes + logits.argmax(-1), minlength=num_classes**2)
        loss = F.cross_entropy(logits, y, reduction="sum")
        top5 = (logits.topk(k, dim=-1).indices == y[:, None]).any(-1).sum()
        return torch.cat([confusion.double(), torch.stack([loss.double(), top5.double()])])

    sums, skipped = evaluation_sums(
        model,
        dataset,
        measure,
        num_classes**2 + 2,
        batch_size=batch_size,
        precision=precision,
        progress=progress,
    )
    confusion = sums[: num_classes**2].round().long().view(num_classes, num_classes).cpu()
    count = int(confusion.sum())
    return Accuracy(
        top1=confusion.diagonal().sum().item() / count,
        top5=sums[-1].item() / count,
        loss=sums[-2].item() / count,
        confusion=confusion,
        count=count,
        skipped=skipped,
    )
