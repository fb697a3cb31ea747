"""The check every export runs: the written file against the PyTorch model on the same inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from vitkit.export.trace import evaluating, example_input
from vitkit.models.registry import Model

CHECK_BATCH_SIZES = (1, 7)  # one image, and a batch size the graph was not traced with
FP32_TOLERANCE = 1e-4  # largest absolute logit difference an fp32 export may show

Runner = Callable[[np.ndarray], np.ndarray]  # float32 images [B, C, H, W] -> logits [B, K]


class ExportMismatch(RuntimeError):
    """The exported file computes other logits than the PyTorch model."""


@dataclass(frozen=True)
class ExportCheck:
    """How closely an exported file reproduces the PyTorch model's float32 logits."""

    what: str
    batch_sizes: tuple[int, ...]
    max_abs_diff: float
    top1_agree: int
    count: int
    tolerance: float | None

    def summary(self) -> str:
        bound = f" (tolerance {self.tolerance:.0e})" if self.tolerance is not None else ""
        sizes = ", ".join(map(str, self.batch_sizes))
        return (
            f"check: {self.what} vs PyTorch fp32 at batch sizes {sizes}: largest |logit difference| "
            f"{self.max_abs_diff:.3g}{bound}, top-1 agreement {self.top1_agree}/{self.count}"
        )

    @property
    def passed(self) -> bool:
        return self.tolerance is None or self.max_abs_diff <= self.tolerance


def compare(
    model: Model,
    run_exported: Runner,
    what: str,
    *,
    batch_sizes: Sequence[int] = CHECK_BATCH_SIZES,
    tolerance: float | None = FP32_TOLERANCE,
) -> ExportCheck:
    """Logits of `run_exported` and of `model` (float32, eval mode) on random inputs in [-1, 1]; an
    ExportMismatch when the largest difference is above `tolerance` (None: report only, as for int8)."""
    worst, agree, count = 0.0, 0, 0
    with evaluating(model), torch.no_grad():
        for batch in batch_sizes:
            x = example_input(model, batch).float()
            reference = model(x).float().cpu().numpy()
            exported = np.asarray(run_exported(x.cpu().numpy()), dtype=np.float32)
            if exported.shape != reference.shape:
                raise ExportMismatch(
                    f"{what}: logits of shape {exported.shape} at batch size {batch}, expected {reference.shape}"
                )
            worst = max(worst, float(np.abs(exported - reference).max()))
            agree += int((exported.argmax(-1) == reference.argmax(-1)).sum())
            count += batch
    check = ExportCheck(what, tuple(batch_sizes), worst, agree, count, tolerance)
    if not check.passed:
        raise ExportMismatch(f"{check.summary()}: above the tolerance, nothing written")
    return check
