"""Optimizers and the learning-rate schedule of the paper (B.1): Adam(W) or SGD, warmup then linear/cosine decay.

The schedule is a pure function of the step, so resuming needs no scheduler state beyond the step itself.
"""

from __future__ import annotations

import math

import torch

from vitkit.models.registry import Trainable
from vitkit.recipe.run_config import OptimSection


def parameter_groups(model: Trainable, weight_decay: float) -> list[dict]:
    """Decayed and non-decayed groups: biases, norms, position embeddings and class token are exempt."""
    exempt = model.no_weight_decay() if weight_decay else set()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in params if n not in exempt]
    no_decay = [p for n, p in params if n in exempt]
    groups = [{"params": decay, "weight_decay": weight_decay}]
    return groups + [{"params": no_decay, "weight_decay": 0.0}] if no_decay else groups


def build_optimizer(model: Trainable, optim: OptimSection, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with decoupled weight decay, or SGD with momentum; fused kernels where the device has them."""
    groups = parameter_groups(model, optim.weight_decay)
    fast = {"fused": True} if device.type in ("cuda", "cpu") else {"foreach": True}
    if optim.name == "adamw":
        return torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas, **fast)
    if optim.name == "sgd":
        return torch.optim.SGD(groups, lr=optim.lr, momentum=optim.momentum, **fast)
    raise ValueError(f"optim.name must be 'adamw' or 'sgd', got {optim.name!r}")


def learning_rate(step: int, total_steps: int, optim: OptimSection) -> float:
    """Rate for 0-based `step`: linear warmup to optim.lr over warmup_steps, then linear or cosine decay to 0."""
    if step < optim.warmup_steps:
        return optim.lr * (step + 1) / optim.warmup_steps
    progress = (step - optim.warmup_steps) / max(total_steps - optim.warmup_steps, 1)
    if optim.schedule == "cosine":
        return optim.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    return optim.lr * (1.0 - progress)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
