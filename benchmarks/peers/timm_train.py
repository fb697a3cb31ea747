#!/usr/bin/env python3
"""The hand-written peer of `vitkit train`: a plain timm training loop, as one writes it by hand.

timm's ViT, `torch.optim.AdamW`, cross-entropy with label smoothing, gradient clipping, the forward pass and loss
under bf16 autocast; nothing else (no EMA, no fused kernels, no allocator tuning). `plain_step` is what
benchmarks/train_vs_peer.py times against the engine's step on the same batches; run alone, it trains on random
images and prints images/s.

    python benchmarks/peers/timm_train.py --model vit_small_patch16_224 --batch-size 32 --steps 20
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import timm
import torch
import torch.nn.functional as F
from torch import nn


def plain_step(
    model: nn.Module, lr: float, weight_decay: float, smoothing: float, clip: float
) -> Callable[[torch.Tensor, torch.Tensor], float]:
    """One training step of `model` on a batch (x, y) under bf16 autocast; returns the loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y, label_smoothing=smoothing)
        optimizer.zero_grad()
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    model = timm.create_model(args.model, num_classes=10)
    step = plain_step(model, lr=1e-3, weight_decay=0.05, smoothing=0.1, clip=1.0)
    x, y = torch.randn(args.batch_size, 3, 224, 224), torch.randint(0, 10, (args.batch_size,))
    step(x, y)  # warm-up
    start = time.perf_counter()
    for _ in range(args.steps):
        step(x, y)
    print(f"{args.steps * args.batch_size / (time.perf_counter() - start):.2f} images/s")


if __name__ == "__main__":
    main()
