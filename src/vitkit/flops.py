"""FLOP accounting (Appendix D.5): count with the math attention backend, since the fused CPU kernel is not counted."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from vitkit.models import as_model


def count_flops(
    model: nn.Module, input_size: tuple[int, ...], batch_size: int = 1, every_token: bool = False
) -> int:
    """Forward FLOPs (multiply-add = 2) of `model(x)` for one batch of `input_size` (C, H, W); works on meta-device
    models. `every_token` counts every layer on every token, as the paper's and timm's tables do, where a
    class-token ViT's logits compute the last layer for the class token alone (`VisionTransformer.forward`)."""
    net = as_model(model)
    device = next(net.parameters()).device
    x = torch.zeros(batch_size, *input_size, device=device)
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            if every_token:
                net.forward_head(net.forward_features(x))
            else:
                net(x)
    finally:
        net.train(was_training)
    return counter.get_total_flops()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
