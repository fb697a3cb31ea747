"""A normal initialisation that does nothing on the meta device.

The weights loaders build a model on the meta device, where nothing is allocated, then load the stored tensors
into it; torch's `normal_` on a meta tensor goes through its Python reference kernels, whose first call imports
torch._dynamo: seconds of a command that loads pretrained weights (predict, a linear head's fit), for numbers
that are overwritten at once. The other initialisers have meta kernels of their own.
"""

from __future__ import annotations

import torch
from torch import nn


def normal_(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """`tensor` drawn from N(0, std^2) in place; a meta tensor (no values) is left as it is."""
    if tensor.is_meta:
        return tensor
    return nn.init.normal_(tensor, std=std)
