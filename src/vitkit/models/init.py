"""The official (vit_jax) initialisers, and a normal initialisation that does nothing on the meta device.

The weights loaders build a model on the meta device, where nothing is allocated, then load the stored tensors
into it; torch's `normal_` on a meta tensor goes through its Python reference kernels, whose first call imports
torch._dynamo: seconds of a command that loads pretrained weights (predict, a linear head's fit), for numbers
that are overwritten at once. The other initialisers have meta kernels of their own.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def normal_(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """`tensor` drawn from N(0, std^2) in place; a meta tensor (no values) is left as it is."""
    if tensor.is_meta:
        return tensor
    return nn.init.normal_(tensor, std=std)


def lecun_normal_(weight: torch.Tensor) -> torch.Tensor:
    """flax's lecun_normal: truncated normal with variance 1 / fan_in (the official patch-embedding init)."""
    fan_in = weight[0].numel()
    std = math.sqrt(1.0 / fan_in) / 0.87962566103423978  # the std of a unit normal truncated at +-2
    return nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


def xavier_uniform_fused_(weight: torch.Tensor, parts: int) -> None:
    """Xavier-uniform as if q, k and v were separate D x D kernels, as in the official code."""
    fan_out, fan_in = weight.shape[0] // parts, weight.shape[1]
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    nn.init.uniform_(weight, -bound, bound)


def zero_(module: nn.Module) -> None:
    """Every parameter of `module` to zero (the zero-initialised head of §3.2)."""
    for p in module.parameters():
        nn.init.zeros_(p)
