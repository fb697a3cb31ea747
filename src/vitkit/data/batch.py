"""What the data pipeline hands the engine: one batch of preprocessed images, and what could not be read."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Batch:
    """Preprocessed images (float32, [-1, 1]), their labels and sample indices, and the step they belong to.

    Images that could not be read are left out and named in `skipped` (their one-line errors, which start with
    the file or row); `error` is set instead when the source itself failed (a shard that ends early), so the
    main process raises it as one line rather than as a DataLoader worker's traceback.
    """

    images: torch.Tensor
    labels: torch.Tensor
    indices: torch.Tensor
    step: int = -1
    skipped: list[str] = field(default_factory=list)
    error: str = ""
