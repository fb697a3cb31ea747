"""The loop every evaluation over a split shares: this rank's batches, the model in eval mode (each module's mode
restored after, however the loop ends), the chosen precision, and sums reduced over the ranks."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from vitkit.collectives import all_reduce_sum, world
from vitkit.data import Batch, Source, eval_batches
from vitkit.models import as_model
from vitkit.precision import Precision, choose_precision
from vitkit.sizes import check_batch_size, to_pair

Measure = Callable[[int, Batch], torch.Tensor]  # (batch number, batch) -> its float64 sums


def architecture(model: nn.Module) -> Any:
    """The config of what `model` computes: its own (a vitkit model, masked patch prediction, their compiled
    forms), else that of the vitkit model inside DistributedDataParallel."""
    config = getattr(model, "config", None)
    return config if config is not None else as_model(model).config


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """`model` in eval mode for the block; afterwards every module back in exactly the mode it had."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def rank_chunks(length: int, batch_size: int) -> list[tuple[int, torch.Tensor]]:
    """(batch number, indices) of this rank's batches: every world_size-th batch of the split, padded with empty
    ones so that every rank makes the same number of forward calls (FSDP gathers weights in each)."""
    check_batch_size(batch_size)
    rank, world_size = world()
    chunks = torch.arange(length).split(batch_size)
    mine = [(i, chunks[i]) for i in range(rank, len(chunks), world_size)]
    calls = math.ceil(len(chunks) / world_size)
    return mine + [(-1, torch.arange(0))] * (calls - len(mine))


@torch.no_grad()
def evaluation_sums(
    model: nn.Module,
    dataset: Source,
    measure: Measure,
    size: int,
    *,
    batch_size: int = 500,
    precision: Precision | None = None,
    progress: str | None = None,
) -> tuple[torch.Tensor, list[str]]:
    """The sum over the split of `measure(batch number, batch)` (float64 [size]), over all ranks: the batches in
    the model's input size and channels with the paper's preprocessing (resize, [-1, 1]), each measured in eval
    mode under `precision` (default float32); and the images this rank's batches left out as unreadable. With
    `progress`, rank 0 shows a bar of that name on stderr, closed before the function returns."""
    device = next(model.parameters()).device
    precision = precision or choose_precision("fp32", device)
    config = architecture(model)
    sums = torch.zeros(size, dtype=torch.float64, device=device)
    skipped: list[str] = []
    numbered = rank_chunks(len(dataset), batch_size)
    batches = eval_batches(
        dataset, [c for _, c in numbered], to_pair(config.img_size), config.in_chans, device, config.mean_std
    )
    shown = progress is not None and world()[0] == 0
    bar = tqdm(total=len(dataset), desc=progress, unit="image", file=sys.stderr, disable=not shown)
    with eval_mode(model), bar:
        for (number, chunk), batch in zip(numbered, batches, strict=True):
            skipped += batch.skipped
            with precision.autocast():
                sums += measure(number, batch)
            bar.update(len(chunk) * world()[1])
    all_reduce_sum(sums)
    return sums, skipped
