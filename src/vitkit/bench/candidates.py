"""What the inference and memory benchmarks time: a registered model with a random head, its forward pass as a
timing candidate, and its FLOPs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import vitkit
from vitkit.flops import count_flops
from vitkit.models.registry import Model
from vitkit.precision import autocast


def bench_model(name: str, img_size: int | None = None, num_classes: int = 1000, seed: int = 0) -> Model:
    """A registered model in eval mode, its head random: the zero-initialised head would make every peer agree
    trivially, random logits make the same-outputs check mean something."""
    torch.manual_seed(seed)
    overrides: dict[str, Any] = {
        "num_classes": num_classes,
        **({"img_size": img_size} if img_size is not None else {}),
    }
    model = vitkit.create_model(name, **overrides)
    head = getattr(model, "head", None)
    if isinstance(head, nn.Linear):
        nn.init.normal_(head.weight, std=0.02)
    return model.eval()


def forward_call(
    model: Callable[[torch.Tensor], object], x: torch.Tensor, dtype: torch.dtype | None = None
) -> Callable[[], object]:
    """One inference-mode forward of `x` (under autocast to `dtype`, if given), as a candidate for
    `timing.alternate`; on CUDA it waits for the GPU to finish."""

    def run() -> object:
        with torch.inference_mode(), autocast(x.device, dtype):
            out = model(x)
        synchronize(x.device)
        return out

    return run


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on a CUDA device (timing); nothing on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forward_flops(model: nn.Module, x: torch.Tensor, every_token: bool = False) -> float:
    """FLOPs of one forward of the batch `x`: as vitkit computes the logits, or with `every_token` as the peers do
    (every layer on every token; `count_flops`)."""
    return float(count_flops(model, tuple(x.shape[1:]), batch_size=x.shape[0], every_token=every_token))


def performed_flops(implementation: str, vitkit_flops: float, peer_flops: float) -> float:
    """The FLOPs an implementation performs: vitkit's own count for vitkit's rows, every token's for a peer's."""
    return vitkit_flops if implementation.startswith("vitkit") else peer_flops
