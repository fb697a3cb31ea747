"""The precision policy: bf16 autocast or float32, for every entry point."""

from __future__ import annotations

import torch

PRECISIONS = ("auto", "bf16", "fp32")


def mixed_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16 autocast on CUDA ('auto') or when asked; float32 otherwise (CPU bf16 is slower on most CPUs)."""
    return torch.bfloat16 if precision == "bf16" or (precision == "auto" and device.type == "cuda") else None
