"""The options of `vitkit train`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.train only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands._arguments import add_precision_argument
from vitkit.configs import shipped_recipes

HELP = "train a model from a recipe (default: a small ViT on Fashion-MNIST, minutes on a CPU)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        help="TOML recipe with [model] [data] [optim] [train]: a file, or a recipe shipped with vitkit by name "
        f"({', '.join(shipped_recipes())})",
    )
    parser.add_argument("--out", help="run directory (default: runs/<recipe>-<time>)")
    parser.add_argument("--model", help="shorthand for model.name=X: a registry model with its own defaults")
    parser.add_argument("--lr", type=float, help="shorthand for optim.lr=LR")
    parser.add_argument("--batch-size", type=int, help="shorthand for train.batch_size=B")
    parser.add_argument("--steps", type=int, help="shorthand for train.steps=N")
    parser.add_argument(
        "--epochs", type=float, help="run length in passes over the training images instead of --steps"
    )
    parser.add_argument("--seed", type=int, help="shorthand for train.seed=S")
    parser.add_argument("--checkpoint-every", type=int, help="shorthand for train.checkpoint_every=N")
    parser.add_argument("--data-dir", help="shorthand for data.data_dir=DIR")
    add_precision_argument(parser, default=None, what="shorthand for train.precision=P: ")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its last checkpoint"
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved recipe (every field: value, default, help) as TOML, and train nothing",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print nothing but errors (the run directory's metrics.jsonl and report.json hold the log and result)",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="section.field=value", help="e.g. optim.lr=1e-3 model.dropout=0"
    )
