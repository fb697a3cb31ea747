"""Top-1 of an ONNX export on a data split, with vitkit's evaluation preprocessing: how much int8 costs."""

from __future__ import annotations

import os

import torch

from vitkit.data import Source, eval_batches
from vitkit.export.onnx_export import read_onnx_metadata, runner

EVAL_BATCH = 250


def onnx_top1(path: str | os.PathLike, dataset: Source, *, batch_size: int = EVAL_BATCH) -> float:
    """Fraction of `dataset` whose top-1 class under the ONNX file at `path` is the label (ONNX Runtime, CPU)."""
    metadata = read_onnx_metadata(path)
    channels, height, width = metadata["input_size"]
    if metadata["num_classes"] != len(dataset.classes):
        raise ValueError(
            f"{path}: {metadata['num_classes']} classes, the dataset {dataset.description} has {len(dataset.classes)}"
        )
    run = runner(path)
    chunks = list(torch.arange(len(dataset)).split(batch_size))
    hits = count = 0
    mean_std = (metadata["mean"], metadata["std"])
    for batch in eval_batches(dataset, chunks, (height, width), channels, torch.device("cpu"), mean_std):
        logits = torch.from_numpy(run(batch.images.float().numpy()))
        hits += int((logits.argmax(-1) == batch.labels).sum())
        count += len(batch.labels)
    if not count:
        raise ValueError(f"{dataset.description}: no readable image to evaluate {path} on")
    return hits / count
