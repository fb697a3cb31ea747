"""Run length in epochs, the unit timm users count in: the optimizer steps E passes over the training images take."""

from __future__ import annotations

import math

from vitkit.data import ReadOptions, open_source
from vitkit.training.recipe import RunConfig


def training_images(config: RunConfig) -> int:
    """Images a run of `config` trains on: its training split less `data.val_split`, or `data.train_subset`."""
    data = config.data
    if data.train_subset:
        return data.train_subset
    train = open_source(data.source, "train", data.data_dir, ReadOptions(on_corrupt=data.on_corrupt))
    return len(train) - data.val_split


def steps_for_epochs(config: RunConfig, epochs: float) -> int:
    """Steps of `train.batch_size` images that see the training images `epochs` times (rounded up)."""
    if not (math.isfinite(epochs) and epochs > 0):
        raise ValueError(f"--epochs must be a positive number, got {epochs}")
    return max(1, math.ceil(epochs * training_images(config) / config.train.batch_size))
