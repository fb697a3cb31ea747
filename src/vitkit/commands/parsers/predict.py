"""The options of `vitkit predict`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.predict only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands import positive_int
from vitkit.commands._arguments import add_max_pixels_argument, add_precision_argument

HELP = (
    "classify images (resize to the model size, pixels to [-1, 1]); print the top-k classes or write a file"
)


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
    parser.add_argument(
        "--labels",
        help="text file with one class name per line, in class-index order (default: the names the weights carry)",
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="write one record per image to FILE instead of printing tables: .jsonl (JSON Lines) or .csv",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument(
        "--batch-size", type=positive_int, default=32, help="images per forward pass (default 32)"
    )
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda:1', ...")
    add_precision_argument(parser)
    parser.add_argument("--topk", type=int, default=5, help="classes per image (default 5)")
    add_max_pixels_argument(parser)
