"""`vitkit bench memory`: peak memory (and optionally time) of a training step with and without gradient
checkpointing."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch import nn

from vitkit.bench.candidates import bench_model
from vitkit.bench.memory import peak_allocated_bytes, resident_bytes
from vitkit.bench.options import add_clock
from vitkit.bench.timing import alternate

NAME = "memory"
HELP = "peak memory of an AdamW training step with and without gradient checkpointing (measured, not fitted)"
COLUMNS = None
MIB = 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="ViT-B/16", help="registered model (default ViT-B/16)")
    parser.add_argument("--batch-size", type=int, default=32, help="default 32")
    parser.add_argument("--img-size", type=int, default=None, help="input size (default: the model's)")
    parser.add_argument("--time-rounds", type=int, default=0, help="also time both steps, alternated")
    add_clock(parser)


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    return checkpointing_memory(args.model, args.batch_size, args.img_size, args.time_rounds, log, args.clock)


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor):
    """forward, cross-entropy, backward, optimizer step, gradients freed: what a training loop does per batch."""

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def checkpointing_memory(
    model_name: str = "ViT-B/16", batch_size: int = 32, img_size: int | None = None, time_rounds: int = 0,
    log: Callable[[str], None] | None = None, clock: str = "wall",
) -> list[dict]:
    """Peak memory of one AdamW training step with and without gradient checkpointing (measured, not fitted); with
    `time_rounds`, also the step time of both, alternated."""
    model = bench_model(model_name, img_size)
    shape = (model.config.in_chans, *model.config.img_size)
    x, y = torch.randn(batch_size, *shape), torch.randint(0, model.config.num_classes, (batch_size,))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = _train_step(model, optimizer, x[:1], y[:1])
    step()
    resident = resident_bytes(model, optimizer)
    rows, steps = [], {}
    for enabled in (False, True):
        model.set_grad_checkpointing(enabled)
        step = _train_step(model, optimizer, x, y)
        peak = peak_allocated_bytes(step)
        label = "checkpointing" if enabled else "no checkpointing"
        steps[label] = (lambda s=step, e=enabled: (model.set_grad_checkpointing(e), s()))
        rows.append({"model": model_name, "batch": batch_size, "gradient checkpointing": enabled,
                     "peak above resident (MiB)": peak / MIB, "resident (MiB)": resident / MIB,
                     "peak total (MiB)": (peak + resident) / MIB})
        if log:
            log(str(rows[-1]))
    base = rows[0]["peak above resident (MiB)"]
    for row in rows:
        row["vs no checkpointing"] = row["peak above resident (MiB)"] / base
    if time_rounds:
        results = alternate(steps, rounds=time_rounds, warmup=0, clock=clock)
        for row, label in zip(rows, steps):
            row["step s (median)"] = results[label].median
            row["images/s"] = batch_size / results[label].median
    model.set_grad_checkpointing(False)
    return rows
