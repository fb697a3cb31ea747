"""FLOP accounting (Appendix D.5): count with the math attention backend, since the fused CPU kernel is not counted."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode


def count_flops(model: nn.Module, input_size: tuple[int, ...], batch_size: int = 1) -> int:
    """Forward FLOPs (multiply-add = 2) for one batch of `input_size` (C, H, W); works on meta-device models."""
    device = next(model.parameters()).device
    x = torch.zeros(batch_size, *input_size, device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(x)
    finally:
        model.train(was_training)
    return counter.get_total_flops()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
