"""`vitkit predict IMAGE... --weights W`: classify images (the paper's eval preprocessing), top-k, as a table or
as a file a program reads (`--output preds.jsonl` / `.csv`).

Exit status: 0 when every named file was classified (unreadable files found by scanning a directory are skipped,
each with a line, and recorded in --output); 1 when a file named on the command line could not be read (the
others are still classified and written); 2 when no image at all could be classified.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from vitkit.allocator import keep_freed_memory
from vitkit.data.decode import find_images
from vitkit.data.file_batches import FileChunks, file_batches
from vitkit.destinations import check_file_destination
from vitkit.device import resolve_device
from vitkit.evaluation.predictions import Prediction, output_format, write_predictions
from vitkit.models import ResNetConfig, ViTConfig
from vitkit.models.registry import Model
from vitkit.precision import Precision, inference_precision
from vitkit.sizes import to_pair
from vitkit.weights import load_weights

PROGRESS_MIN = 8  # a progress bar for more images than this


def class_names(path: str | None, model: Model) -> list[str] | None:
    """Names in class-index order: the --labels file, else the weights' own, else None (indices)."""
    num_classes = model.config.num_classes
    if path is None:
        return model.class_names
    labels = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    if len(labels) != num_classes:
        raise ValueError(f"{path}: {len(labels)} labels for a model with {num_classes} classes")
    return labels


def run(args: argparse.Namespace) -> int:
    if args.topk < 1:
        raise ValueError(f"--topk must be at least 1, got {args.topk}")
    if args.output:  # an unknown extension, or a destination not to write, is refused before any work
        output_format(args.output)
        check_file_destination(args.output, overwrite=args.overwrite)
    model = load_weights(args.weights, format=args.format).to(resolve_device(args.device)).eval()
    if not model.config.num_classes:
        raise ValueError(f"{args.weights}: the model has no classification head (num_classes=0)")
    names = class_names(args.labels, model)
    files, missing = find_images(args.images)
    # the batches it will run: a few images are decided without a measurement that would cost more than them
    precision = inference_precision(
        args.precision, model, max(1, min(args.batch_size, len(files))), images=len(files)
    )
    print(f"device {precision.device}, precision {precision}", file=sys.stderr)
    if precision.device.type == "cpu":
        keep_freed_memory()  # each batch reuses the last one's activations instead of faulting them in again
    named = {Path(p) for p in args.images if not Path(p).is_dir()}
    predictions = [Prediction(item["path"], error=f"{item['path']}: {item['reason']}") for item in missing]
    for prediction in predictions:
        print(f"vitkit predict: skipping {prediction.error}", file=sys.stderr)
    k = min(args.topk, model.config.num_classes)
    progress = tqdm(total=len(files), unit="image", file=sys.stderr, disable=len(files) <= PROGRESS_MIN)
    with progress, torch.no_grad(), precision.inference(model) as forward:  # weights cast once for all
        for prediction in classify(files, forward, precision, model.config, names, k, args):
            progress.update()
            if prediction.error is not None:
                progress.write(f"vitkit predict: skipping {prediction.error}", file=sys.stderr)
            elif not args.output:  # the bar (stderr) cleared first and drawn again below, never on its line
                progress.write(table(prediction, names is not None), file=sys.stdout)
            predictions.append(prediction)
    if not any(p.error is None for p in predictions):
        raise ValueError("no readable image among " + " ".join(args.images))
    if args.output:
        write_predictions(args.output, predictions, k)
        print(f"{len(predictions)} records -> {args.output}", file=sys.stderr)
    failed_named = [p for p in predictions if p.error is not None and Path(p.path) in named]
    return 1 if failed_named else 0


def classify(
    files: list[Path],
    forward: nn.Module,
    precision: Precision,
    config: ViTConfig | ResNetConfig,
    names: list[str] | None,
    k: int,
    args: argparse.Namespace,
) -> Iterator[Prediction]:
    """A Prediction per file, in order; readable images go through the model `args.batch_size` at a time, decoded
    in worker processes while the model runs on the batch before (vitkit.data.file_batches)."""
    chunks = FileChunks(
        files, args.batch_size, to_pair(config.img_size), config.in_chans, args.max_pixels, config.mean_std
    )
    for batch in file_batches(chunks):
        done = {
            position: Prediction(str(files[position]), error=error)
            for position, error in batch.errors.items()
        }
        if batch.positions:
            top = forward(batch.pixels.to(precision.device)).float().softmax(-1).topk(k)
            for position, values, indices in zip(
                batch.positions, top.values.tolist(), top.indices.tolist(), strict=True
            ):
                labels = [names[i] if names else str(i) for i in indices]
                done[position] = Prediction(str(files[position]), labels, indices, values)
        yield from (done[position] for position in sorted(done))


def table(prediction: Prediction, named: bool) -> str:
    """An image's top classes, as printed on stdout."""
    lines = [prediction.path, f"  {'rank':>4}  {'prob':>7}  class"]
    for rank, (p, name, index) in enumerate(
        zip(prediction.probs, prediction.classes, prediction.indices, strict=True), start=1
    ):
        lines.append(f"  {rank:>4}  {p:7.4f}  {name}" + (f" ({index})" if named else ""))
    return "\n".join(lines)
