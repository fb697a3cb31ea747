"""Data for training and evaluation: sources (the Source protocol; in memory, read per sample or streamed),
step-keyed batch order, transforms, and the pipeline that turns them into batches."""

from .batch import Batch
from .batch_order import global_batch_indices, shard, steps_per_epoch
from .builtin import load_dataset
from .decode import ImageDecodeError, decode_image
from .folder import FolderSource
from .hf_datasets import HFSource
from .in_memory import ImageDataset
from .lazy import LazySource, per_sample_eval, per_sample_steps
from .pipeline import TrainBatches, eval_batches, gather_images
from .shards import ShardSource
from .source import ReadOptions, Source, StepPlan, StepReader
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
    "ReadOptions",
    "ShardSource",
    "Source",
    "StepPlan",
    "StepReader",
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
    "per_sample_eval",
    "per_sample_steps",
    "shard",
    "steps_per_epoch",
]
