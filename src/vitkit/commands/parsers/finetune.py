"""The options of `vitkit finetune`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.finetune only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands.parsers import train

HELP = "fine-tune any weights vitkit.load_weights reads (default: the paper's recipe on Fashion-MNIST)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--weights", required=True, help="run directory, vitkit weights dir, official .npz, timm/HF file"
    )
    train.add_arguments(parser)
