"""Data for training and evaluation: sources (in memory or read per sample), step-keyed batch order, transforms,
and the pipeline that turns them into batches."""

from .batch import Batch
from .decode import ImageDecodeError, decode_image
from .folder import FolderSource
from .hf import HFSource
from .lazy import LazySource
from .loader import global_batch_indices, shard, steps_per_epoch
from .pipeline import Source, TrainBatches, eval_batches, gather_images
from .shards import ShardSource
from .sources import ImageDataset, load_dataset
from .spec import open_source
from .subset import balanced_subset, hold_out
from .transforms import TrainTransform, eval_transform

__all__ = [
    "Batch",
    "FolderSource",
    "HFSource",
    "ImageDecodeError",
    "ImageDataset",
    "LazySource",
    "ShardSource",
    "Source",
    "TrainBatches",
    "TrainTransform",
    "balanced_subset",
    "decode_image",
    "eval_batches",
    "eval_transform",
    "gather_images",
    "global_batch_indices",
    "hold_out",
    "load_dataset",
    "open_source",
    "shard",
    "steps_per_epoch",
]
