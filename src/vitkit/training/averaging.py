"""Polyak averaging (§4.1: EMA 0.9999 when fine-tuning); evaluation and the final weights use the average.

The decay warms up as TensorFlow's ExponentialMovingAverage with num_updates, min(decay, (1 + n) / (10 + n)),
so short runs are not dominated by the initial weights.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel


def ema_model(model: nn.Module, decay: float) -> AveragedModel:
    """An AveragedModel of `model` updated with the warmed-up exponential decay."""

    @torch.no_grad()
    def update(
        averaged: list[torch.Tensor] | tuple[torch.Tensor, ...],
        current: list[torch.Tensor] | tuple[torch.Tensor, ...],
        num_averaged: torch.Tensor | int,
    ) -> None:
        n = int(num_averaged)
        torch._foreach_lerp_(averaged, current, 1.0 - min(decay, (1.0 + n) / (10.0 + n)))

    averaged = AveragedModel(model, multi_avg_fn=update, use_buffers=True)
    averaged.eval()
    return averaged
