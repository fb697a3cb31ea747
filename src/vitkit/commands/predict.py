"""`vitkit predict IMAGE... --weights W`: classify images (the paper's eval preprocessing), top-k."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from vitkit.data.decode import ImageDecodeError, add_max_pixels_argument, decode_image, find_images
from vitkit.data.transforms import eval_transform
from vitkit.device import resolve_device
from vitkit.precision import add_precision_argument, inference_precision
from vitkit.weights import load_weights

HELP = "classify images (resize to the model size, pixels to [-1, 1]) and print the top-k classes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "images",
        nargs="+",
        metavar="PATH",
        help="image files (JPEG, PNG, WebP, ...; grayscale, RGBA, 16-bit) or directories (searched recursively)",
    )
    parser.add_argument("--weights", required=True, help="anything vitkit.load_weights reads")
    parser.add_argument(
        "--format", choices=("npz", "vitkit", "timm", "hf"), help="weights format if not evident"
    )
    parser.add_argument("--labels", help="text file with one class name per line, in class-index order")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda:1', ...")
    add_precision_argument(parser)
    parser.add_argument("--topk", type=int, default=5, help="classes to show per image (default 5)")
    add_max_pixels_argument(parser)


def read_labels(path: str | None, num_classes: int) -> list[str]:
    """Class names, one per line; their count must equal the model's classes."""
    if path is None:
        return [str(i) for i in range(num_classes)]
    labels = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    if len(labels) != num_classes:
        raise ValueError(f"{path}: {len(labels)} labels for a model with {num_classes} classes")
    return labels


def run(args: argparse.Namespace) -> int:
    if args.topk < 1:
        raise ValueError(f"--topk must be at least 1, got {args.topk}")
    model = load_weights(args.weights, format=args.format).to(resolve_device(args.device)).eval()
    config = model.config
    if not config.num_classes:
        raise ValueError(f"{args.weights}: the model has no classification head (num_classes=0)")
    labels = read_labels(args.labels, config.num_classes)
    k = min(args.topk, config.num_classes)
    precision = inference_precision(args.precision, model, 1)
    print(f"device {precision.device}, precision {precision}", file=sys.stderr)
    files, skipped = find_images(args.images)
    for item in skipped:
        print(f"vitkit predict: skipping {item['path']}: {item['reason']}", file=sys.stderr)
    classified = 0
    with torch.no_grad(), precision.inference(model):  # weights cast once for every image
        for path in files:
            try:
                pixels = decode_image(path, max_pixels=args.max_pixels)
            except ImageDecodeError as error:
                print(f"vitkit predict: skipping {error}", file=sys.stderr)
                continue
            x = eval_transform(pixels[None].to(precision.device), config.img_size, config.in_chans)
            probs = model(x).float().softmax(-1)[0]
            top = probs.topk(k)
            print(path)
            print(f"  {'rank':>4}  {'prob':>7}  class")
            for rank, (p, index) in enumerate(
                zip(top.values.tolist(), top.indices.tolist(), strict=True), start=1
            ):
                name = labels[index] if args.labels else str(index)
                print(f"  {rank:>4}  {p:7.4f}  {name}" + (f" ({index})" if args.labels else ""))
            classified += 1
    if not classified:
        raise ValueError("no readable image among " + " ".join(args.images))
    return 0
