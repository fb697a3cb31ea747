"""`vitkit bench memory`: peak memory (and optionally time) of a training step with and without gradient
checkpointing."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from vitkit.bench.candidates import bench_model, synchronize
from vitkit.bench.memory import fit_memory, peak_allocated_bytes, resident_bytes
from vitkit.bench.options import bench_dtypes
from vitkit.bench.timing import alternate
from vitkit.models.registry import Model
from vitkit.precision import autocast

NAME = "memory"
HELP = (
    "peak memory of an AdamW training step with and without gradient checkpointing, fp32 and/or bf16, and the "
    "largest batch that fits a budget"
)
COLUMNS = None
MIB = 2**20


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    return checkpointing_memory(
        args.model,
        args.batch_size,
        args.img_size,
        args.time_rounds,
        log,
        args.clock,
        args.precision,
        args.budget_gib,
        args.device,
    )


def _step_with_checkpointing(model: Model, enabled: bool, step: Callable[[], object]) -> object:
    """A timing candidate: switch checkpointing to this candidate's setting, then take the step."""
    model.set_grad_checkpointing(enabled)
    return step()


def _train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    dtype: torch.dtype | None = None,
):
    """forward (under autocast to `dtype`), cross-entropy in float32, backward, optimizer step, gradients freed:
    what a training loop does per batch."""

    def step() -> None:
        with autocast(x.device, dtype):
            logits = model(x)
        loss = nn.functional.cross_entropy(logits.float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(x.device)

    return step


def checkpointing_memory(
    model_name: str = "ViT-B/16",
    batch_size: int = 32,
    img_size: int | None = None,
    time_rounds: int = 0,
    log: Callable[[str], None] | None = None,
    clock: str = "wall",
    precision: str = "fp32",
    budget_gib: float = 16.0,
    device: str = "cpu",
) -> list[dict]:
    """Peak memory of one AdamW training step with and without gradient checkpointing, in each precision of
    `precision` (measured, not fitted), at `batch_size` and at half of it: the two points give the memory per
    image and the largest batch within `budget_gib`. With `time_rounds`, also the step time of each, alternated."""
    model = bench_model(model_name, img_size).to(device)
    shape = model.config.input_size
    x = torch.randn(batch_size, *shape, device=device)
    y = torch.randint(0, model.config.num_classes, (batch_size,), device=device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    _train_step(model, optimizer, x[:1], y[:1])()
    resident = resident_bytes(model, optimizer)
    half = max(batch_size // 2, 1)
    rows: list[dict[str, Any]] = []
    steps: dict[str, Callable[[], object]] = {}
    for name, dtype in bench_dtypes(precision).items():
        for enabled in (False, True):
            model.set_grad_checkpointing(enabled)
            step = _train_step(model, optimizer, x, y, dtype)
            fit = fit_memory(
                lambda b: peak_allocated_bytes(_train_step(model, optimizer, x[:b], y[:b], dtype), device),  # noqa: B023
                resident,
                (half, batch_size) if half < batch_size else (1, 2),
            )
            peak = fit.peak(batch_size) - resident
            label = f"{name}, {'checkpointing' if enabled else 'no checkpointing'}"
            steps[label] = functools.partial(_step_with_checkpointing, model, enabled, step)
            rows.append(
                {
                    "model": model_name,
                    "batch": batch_size,
                    "precision": name,
                    "gradient checkpointing": enabled,
                    "peak above resident (MiB)": peak / MIB,
                    "resident (MiB)": resident / MIB,
                    "peak total (MiB)": (peak + resident) / MIB,
                    "MiB/image": fit.per_image / MIB,
                    f"largest batch in {budget_gib:g} GiB": fit.largest_batch(budget_gib * 2**30),
                }
            )
            if log:
                log(str(rows[-1]))
    for row in rows:  # against the same precision without checkpointing
        base = next(r for r in rows if r["precision"] == row["precision"] and not r["gradient checkpointing"])
        row["vs no checkpointing"] = row["peak above resident (MiB)"] / base["peak above resident (MiB)"]
    if time_rounds:
        results = alternate(steps, rounds=time_rounds, warmup=0, clock=clock)
        for row, label in zip(rows, steps, strict=True):
            row["step s (median)"] = results[label].median
            row["images/s"] = batch_size / results[label].median
    model.set_grad_checkpointing(False)
    return rows
