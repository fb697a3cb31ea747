"""The options of `vitkit fewshot`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.fewshot only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands import positive_int
from vitkit.commands._arguments import add_precision_argument

HELP = "few-shot linear evaluation (closed-form ridge on frozen pre-logits features), mean/std over seeds"


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _float_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--weights", required=True, help="weights: any format vitkit.load_weights reads, run directories too"
    )
    parser.add_argument(
        "--data",
        help="data source: dataset name, folder:PATH, hf:PATH (default: a run's own data, else fashion_mnist)",
    )
    parser.add_argument("--data-dir", default=None, help="where the named dataset's files are")
    parser.add_argument(
        "--shots", type=_int_list, default=[1, 5, 10, 25], help="comma-separated (default 1,5,10,25)"
    )
    parser.add_argument(
        "--seeds", type=positive_int, default=3, help="number of sampled subsets (seeds 0..n-1)"
    )
    parser.add_argument(
        "--l2",
        type=_float_list,
        default=[1024.0],
        help="ridge regularisation; comma-separated values share one eigendecomposition (default 1024)",
    )
    parser.add_argument(
        "--num-test", type=positive_int, default=None, help="cap on test images (fixed subset)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=256, help="feature-extraction batch size")
    parser.add_argument("--device", default="cpu", help="torch device for feature extraction")
    add_precision_argument(parser, what="feature extraction in ")
    parser.add_argument("--out", default=None, help="write the results as JSON to this file")
