"""What the inference and memory benchmarks time: a registered model with a random head, its forward pass as a
timing candidate, and its FLOPs."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

import vitkit
from vitkit.flops import count_flops


def bench_model(name: str, img_size: int | None = None, num_classes: int = 1000, seed: int = 0) -> nn.Module:
    """A registered model in eval mode, its head random: the zero-initialised head would make every peer agree
    trivially, random logits make the same-outputs check mean something."""
    torch.manual_seed(seed)
    overrides = {"num_classes": num_classes, **({"img_size": img_size} if img_size is not None else {})}
    model = vitkit.create_model(name, **overrides)
    if isinstance(getattr(model, "head", None), nn.Linear):
        nn.init.normal_(model.head.weight, std=0.02)
    return model.eval()


def forward_call(model: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    """One inference-mode forward of `x`, as a candidate for `timing.alternate`."""

    def run() -> object:
        with torch.inference_mode():
            return model(x)

    return run


def forward_flops(model: nn.Module, x: torch.Tensor) -> float:
    """FLOPs of one forward of the batch `x`."""
    return float(count_flops(model, tuple(x.shape[1:]), batch_size=x.shape[0]))
