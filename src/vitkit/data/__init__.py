"""Data for training and evaluation: in-memory datasets, step-keyed batch order, batched transforms."""

from .loader import global_batch_indices, shard, steps_per_epoch
from .sources import ImageDataset, load_dataset
from .subset import balanced_subset, hold_out
from .transforms import TrainTransform, eval_transform

__all__ = [
    "ImageDataset",
    "TrainTransform",
    "balanced_subset",
    "eval_transform",
    "global_batch_indices",
    "hold_out",
    "load_dataset",
    "shard",
    "steps_per_epoch",
]
