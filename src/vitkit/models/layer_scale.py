"""LayerScale (Touvron et al. 2021, "Going deeper with image transformers"): a learned per-channel scale on each
residual branch of Eq. 2-3, started small so that a deep stack begins close to the identity (DeiT III, DINOv2)."""

from __future__ import annotations

import torch
from torch import nn


class LayerScale(nn.Module):
    """diag(gamma) applied to a residual branch; gamma starts at `init_value` in every channel."""

    def __init__(self, dim: int, init_value: float) -> None:
        super().__init__()
        self.init_value = init_value
        self.gamma = nn.Parameter(torch.full((dim,), float(init_value)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def layer_scale(dim: int, init_value: float | None) -> nn.Module:
    """LayerScale on a residual branch, or the identity (the paper's layers) when `init_value` is None."""
    return nn.Identity() if init_value is None else LayerScale(dim, init_value)
