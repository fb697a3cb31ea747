"""`vitkit predict IMAGE... --weights W`: classify images (the paper's eval preprocessing), top-k."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vitkit.device import resolve_device
from vitkit.precision import add_precision_argument, inference_precision

HELP = "classify images (resize to the model size, pixels to [-1, 1]) and print the top-k classes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "images", nargs="+", help="image files (JPEG, PNG, WebP, ...; grayscale, RGBA, 16-bit)"
    )
    parser.add_argument("--weights", required=True, help="anything vitkit.load_weights reads")
    parser.add_argument(
        "--format", choices=("npz", "vitkit", "timm", "hf"), help="weights format if not evident"
    )
    parser.add_argument("--labels", help="text file with one class name per line, in class-index order")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda:1', ...")
    add_precision_argument(parser)
    parser.add_argument("--topk", type=int, default=5, help="classes to show per image (default 5)")


def read_image(path: str | Path) -> Any:
    """uint8 [3, H, W] tensor: EXIF-rotated, palette/gray/CMYK to RGB, alpha dropped (as the official
    decode_png(channels=3)), 16-bit scaled to 8-bit."""
    import numpy as np
    import torch
    from PIL import Image, ImageOps

    with Image.open(path) as image:
        image.load()
        image = ImageOps.exif_transpose(image)
        if image.mode.startswith(("I", "F")):  # 16/32-bit integer or float grayscale
            values = np.asarray(image, dtype=np.float64)
            wide = image.mode.startswith("I;16") or (image.mode in ("I", "F") and values.max(initial=0) > 255)
            values = np.clip(np.rint(values / 257.0 if wide else values), 0, 255).astype(np.uint8)
            image = Image.fromarray(values)
        rgb = np.asarray(image.convert("RGB"))
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1)


def read_labels(path: str | None, num_classes: int) -> list[str]:
    """Class names, one per line; their count must equal the model's classes."""
    if path is None:
        return [str(i) for i in range(num_classes)]
    labels = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    if len(labels) != num_classes:
        raise ValueError(f"{path}: {len(labels)} labels for a model with {num_classes} classes")
    return labels


def run(args: argparse.Namespace) -> int:
    import torch
    from PIL import Image

    from vitkit.data.transforms import eval_transform
    from vitkit.weights import load_weights

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
    failures = 0
    for path in args.images:
        try:
            pixels = read_image(path)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
            print(f"vitkit predict: error: {path}: cannot read image ({error})", file=sys.stderr)
            failures += 1
            continue
        with torch.no_grad(), precision.autocast():
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
    return 1 if failures else 0
