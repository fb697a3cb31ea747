"""The options of `vitkit demo`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.demo only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands import positive_int
from vitkit.commands._arguments import add_precision_argument

HELP = "build a model (default ViT-B/16), print parameters, GFLOPs and a timed forward pass"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="ViT-B/16", help="registry name (see `vitkit models`)")
    parser.add_argument("--batch-size", type=positive_int, default=2)
    add_precision_argument(parser)
