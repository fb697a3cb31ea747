"""Classification objectives: softmax or sigmoid cross-entropy with label smoothing, on hard or soft labels.

The paper pre-trains with sigmoid cross-entropy (B.1, as in BiT's upstream) and fine-tunes with softmax; both
take the same targets, so MixUp/CutMix soft labels and label smoothing compose with either.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def smooth_targets(labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
    """Probability targets [B, K]: one-hot (or given soft labels) mixed with the uniform distribution."""
    targets = F.one_hot(labels, num_classes).float() if labels.ndim == 1 else labels.float()
    return targets * (1.0 - smoothing) + smoothing / num_classes if smoothing else targets


def classification_loss(logits: torch.Tensor, labels: torch.Tensor, loss: str, smoothing: float) -> torch.Tensor:
    """Mean over the batch of softmax cross-entropy, or of sigmoid cross-entropy summed over the classes."""
    logits = logits.float()  # the loss in float32 also under bf16 autocast
    targets = smooth_targets(labels, logits.shape[-1], smoothing)
    if loss == "softmax":
        return torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()
    if loss == "sigmoid":
        return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1).mean()
    raise ValueError(f"loss must be 'softmax' or 'sigmoid', got {loss!r}")
