"""The options of `vitkit inspect`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.inspect only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands import positive_int
from vitkit.commands._arguments import add_max_pixels_argument, add_precision_argument

HELP = "draw the paper's figures (§4.5, D.7, D.8) for a model: filters, position embeddings, attention"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--weights", required=True, help="weights in any format vitkit loads (e.g. a run's final/)"
    )
    parser.add_argument(
        "--images",
        required=True,
        nargs="+",
        metavar="PATH",
        help="image files or directories (searched recursively)",
    )
    parser.add_argument(
        "--out", required=True, help="output directory for the PNGs, inspect.json and report.html"
    )
    parser.add_argument(
        "--max-images",
        type=positive_int,
        default=128,
        help="images used for the attention distance (paper: 128; default 128)",
    )
    parser.add_argument(
        "--rollout-images", type=int, default=8, help="images shown with their rollout (default 8)"
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="images per forward pass (default: as many as keep the attention maps within ~1 GiB, at most 16)",
    )
    parser.add_argument(
        "--prefix-keys",
        choices=("renormalise", "zero"),
        default="renormalise",
        help="attention distance: drop the class token and renormalise over patches (default), or count it as 0",
    )
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    add_precision_argument(parser)
    add_max_pixels_argument(parser)
    parser.add_argument(
        "--allow-non-finite",
        action="store_true",
        help="inspect weights holding NaN or inf (refused by default)",
    )
