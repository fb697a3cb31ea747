"""The options of `vitkit models`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.models only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands import positive_int

HELP = "list registered models with parameters and GFLOPs per image (at each model's input, or a recipe's)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pattern", nargs="?", default="*", help="glob on paper or timm names, e.g. 'ViT-B*'")
    parser.add_argument(
        "--num-classes", type=positive_int, default=1000, help="classes of the head (default 1000)"
    )
    parser.add_argument(
        "--img-size", type=positive_int, help="count at this resolution (default: the model's)"
    )
    parser.add_argument("--in-chans", type=positive_int, help="count for this many channels (default: 3)")
    parser.add_argument(
        "--config", help="count the model of this TOML recipe, at its resolution and channels"
    )
