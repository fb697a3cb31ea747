"""FLOP accounting (Appendix D.5): count with the math attention backend, since the fused CPU kernel is not counted."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode


def count_flops(
    model: nn.Module, input_size: tuple[int, ...], batch_size: int = 1, every_token: bool = False
) -> int:
    """Forward FLOPs (multiply-add = 2) of `model(x)` for one batch of `input_size` (C, H, W); works on meta-device
    models. `every_token` counts every layer on every token, as the paper's and timm's tables do, where a
    class-token ViT's logits compute the last layer for the class token alone (`VisionTransformer.forward`)."""
    device = next(model.parameters()).device
    x = torch.zeros(batch_size, *input_size, device=device)
    run: Callable[[torch.Tensor], torch.Tensor] = (
        (lambda x: model.forward_head(model.forward_features(x))) if every_token else model  # type: ignore[operator]
    )
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            run(x)
    finally:
        model.train(was_training)
    return counter.get_total_flops()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
