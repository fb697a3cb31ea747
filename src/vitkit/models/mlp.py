"""The MLP of each encoder layer (Eq. 3): two dense layers with a GELU between them, as in the paper, or the
gated variant (SwiGLU) of DINOv2-g."""

from __future__ import annotations

import torch
from torch import nn


class QuickGELU(nn.Module):
    """x * sigmoid(1.702 x): the GELU approximation OpenAI's CLIP weights were trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def activation_module(name: str) -> nn.Module:
    """The activation of the MLP for a config's `activation` (erf GELU, its tanh approximation, QuickGELU)."""
    if name == "quick_gelu":
        return QuickGELU()
    return nn.GELU(approximate="tanh" if name == "gelu_tanh" else "none")


class Mlp(nn.Module):
    """Two dense layers with a GELU between them; dropout after each (Appendix B.1)."""

    def __init__(self, dim: int, hidden: int, activation: str, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = activation_module(activation)
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class SwiGLU(nn.Module):
    """SwiGLU (Shazeer 2020), as DINOv2-g has it: the first layer is 2 x `hidden` wide; SiLU of its first half
    gates its second half. One fused first layer, as timm's SwiGLUPacked and transformers' Dinov2SwiGLUFFN."""

    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, 2 * hidden)
        self.act = nn.SiLU()
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)
        return self.drop2(self.fc2(self.drop1(self.act(gate) * value)))


def build_mlp(dim: int, hidden: int, activation: str, dropout: float) -> nn.Module:
    """The MLP of Eq. 3 for a config's `activation`."""
    if activation == "swiglu":
        return SwiGLU(dim, hidden, dropout)
    return Mlp(dim, hidden, activation, dropout)
